"""Change data capture: a database's changes into a durable changelog file dpcr reads.

* :mod:`dpcr.cdc.postgres` -- a PostgreSQL logical replication slot (wal2json, or the built-in
  pgoutput through :mod:`dpcr.cdc.pgoutput`) into a ``format = "wal2json"`` file; needs the
  ``postgres`` extra (psycopg2).
* :mod:`dpcr.cdc.kafka` -- Debezium envelopes from a Kafka partition into a
  ``format = "debezium"`` file; needs the ``kafka`` extra (kafka-python).

Both append and fsync before they acknowledge the source; ``docs/cdc.md`` states the
guarantees. The command line is ``dpcr capture postgres|kafka``.
"""

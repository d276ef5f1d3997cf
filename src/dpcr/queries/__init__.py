"""dpcr.queries."""

"""dpcr.store."""

"""dpcr.engines."""

"""dpcr.bounding."""

"""dpcr.plans."""

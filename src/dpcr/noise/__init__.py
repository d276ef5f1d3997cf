"""dpcr.noise."""

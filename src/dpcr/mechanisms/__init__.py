"""dpcr.mechanisms."""

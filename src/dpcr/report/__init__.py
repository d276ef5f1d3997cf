"""dpcr.report."""

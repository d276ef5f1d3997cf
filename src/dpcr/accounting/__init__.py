"""dpcr.accounting."""

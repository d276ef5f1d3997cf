"""dpcr.changelog."""

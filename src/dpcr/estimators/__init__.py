"""dpcr.estimators."""

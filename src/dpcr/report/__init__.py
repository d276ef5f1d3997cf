"""What people see: the plan and run text (:mod:`~dpcr.report.text`), the public HTML report
(:mod:`~dpcr.report.html`, content from :mod:`~dpcr.report.data`, charts from
:mod:`dpcr._svg`, a simulation's exact series from :mod:`~dpcr.report.truth`) and the
operator report (:mod:`~dpcr.report.operator`)."""

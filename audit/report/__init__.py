"""The post-mortem report: figures over the audit trail as one offline HTML file (``build_report``)."""

from audit.report.page import Rendered, build_report

__all__ = ["Rendered", "build_report"]

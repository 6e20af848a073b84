"""The report: ``report.md`` and ``report.html`` with the memory charts.
"""

"""Reports from runs: MLPerf scores (``scoring``, ``stats``), the study's tables (``analysis``,
``comparison``), figures (``figures``, ``systemfigs``) and rendering to HTML, Markdown, JSON and CSV.

Entry point: ``build.build_report`` (invoke report, demo).
May import: lab.core, lab.results.
"""

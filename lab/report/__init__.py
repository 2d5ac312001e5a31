"""Reports from runs: MLPerf scores (``scoring``, ``stats``), the study's tables (``records``, ``analysis``,
``comparison``), figures (``figures``, ``systemfigs``) and rendering to HTML and Markdown (``pages``), JSON and CSV.

Entry point: ``build.build_report`` (invoke report, demo).
May import: lab.core, lab.results.
"""

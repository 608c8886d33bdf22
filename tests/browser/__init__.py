"""Real-browser tests (JupyterLab + Debian chromium); fixtures in conftest.py here."""

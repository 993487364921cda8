"""Demo logins (development passwords). No Django import: `scripts/run.py` prints them."""

ADMIN = ("admin", "admin-demo-password")
ANNOTATORS = [(f"annotator{i}", "annotator-demo-password") for i in (1, 2, 3)]

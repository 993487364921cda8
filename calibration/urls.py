"""HTML routes of the calibration app."""

app_name = "calibration"
urlpatterns: list = []

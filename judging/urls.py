"""HTML routes of the judging app."""

app_name = "judging"
urlpatterns: list = []

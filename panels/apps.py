from django.apps import AppConfig


class PanelsConfig(AppConfig):
    name = "panels"
    verbose_name = "LLM panels"

    def ready(self) -> None:
        # The study report (annotation, a lower app) shows a panel section: panels
        # registers its builder there instead of annotation importing panels.
        from annotation import report_sections

        from .services import panel_report_section

        report_sections.section_register(
            "panels",
            panel_report_section,
            template="panels/_report_section.html",
        )

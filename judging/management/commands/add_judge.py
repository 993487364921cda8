"""``add_judge``: register an OpenAI-compatible endpoint as a judge."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from judging.models import Decoding
from judging.services import judge_create
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = "Add a judge (any OpenAI-compatible endpoint: vLLM, SGLang, a hosted API)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--base-url",
            required=True,
            action="append",
            help="e.g. http://127.0.0.1:8001/v1; repeat for replicas",
        )
        parser.add_argument("--model", required=True)
        parser.add_argument(
            "--api-key-env", default="", help="name of the env variable holding the key"
        )
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--max-output-tokens", type=int, default=2048)
        parser.add_argument(
            "--decoding", choices=Decoding.values, default=Decoding.JSON_SCHEMA
        )
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--context-tokens", type=int)
        parser.add_argument("--timeout", type=float, default=120.0)
        parser.add_argument(
            "--extra-body", default="{}", help="JSON merged into each request"
        )

    def handle(self, *args: object, **opts: object) -> None:
        try:
            extra = json.loads(opts["extra_body"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--extra-body is not valid JSON: {exc.msg}") from exc
        try:
            judge = judge_create(
                name=opts["name"],
                base_urls=opts["base_url"],
                model=opts["model"],
                api_key_env=opts["api_key_env"],
                concurrency=opts["concurrency"],
                max_output_tokens=opts["max_output_tokens"],
                decoding=opts["decoding"],
                temperature=opts["temperature"],
                context_tokens=opts["context_tokens"],
                timeout_s=opts["timeout"],
                extra_body=extra,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Added judge {judge.name!r} ({judge.model} at {', '.join(judge.base_urls)})"
            )
        )

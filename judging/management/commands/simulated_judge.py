"""``simulated_judge``: serve the simulated OpenAI-compatible judge until interrupted."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from judging.simulated import FAULTS, SimulatedJudgeServer, SimulatedOptions


class Command(BaseCommand):
    help = (
        "Serve a simulated OpenAI-compatible judge (/v1/models, /v1/chat/completions, "
        "/stats) that answers our Stage A and Stage B prompts from a hidden relevance."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--latency-ms", type=float, default=0.0, help="fixed delay per request"
        )
        parser.add_argument(
            "--fault-rate",
            type=float,
            default=0.0,
            help="probability that a chat request gets a fault (0..1)",
        )
        parser.add_argument(
            "--faults",
            default=",".join(FAULTS),
            help=f"comma-separated faults to draw from (default: {','.join(FAULTS)})",
        )
        parser.add_argument(
            "--hang-s",
            type=float,
            default=None,
            help="how long a 'timeout' fault sleeps (default: client read timeout + 1 s)",
        )
        parser.add_argument(
            "--model", default=None, help="serve only this model name (others get 404)"
        )
        parser.add_argument(
            "--api-key", default=None, help="require this bearer key (others get 401)"
        )
        parser.add_argument(
            "--position-bias",
            type=float,
            default=0.0,
            help="panel lists prompts: probability of naming List 1 whatever it holds",
        )
        parser.add_argument(
            "--rubric-position-bias",
            type=float,
            default=0.0,
            help="panel rubric prompts: relevance boost of the first shown document",
        )

    def handle(self, *args: object, **opts: object) -> None:
        faults = tuple(f.strip() for f in str(opts["faults"]).split(",") if f.strip())
        try:
            options = SimulatedOptions(
                seed=opts["seed"],
                latency_ms=opts["latency_ms"],
                fault_rate=opts["fault_rate"],
                faults=faults,
                hang_s=opts["hang_s"],
                model=opts["model"],
                api_key=opts["api_key"],
                position_bias=opts["position_bias"],
                rubric_position_bias=opts["rubric_position_bias"],
            )
            server = SimulatedJudgeServer((opts["host"], opts["port"]), options)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {opts['host']}:{opts['port']}: {exc.strerror}"
            ) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Simulated judge at {server.url} (seed {options.seed}, latency "
                f"{options.latency_ms:g} ms, fault rate {options.fault_rate:g}); "
                "stats at /stats. Ctrl-C stops it."
            )
        )
        self.stdout.flush()
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            server.stopping.set()
            server.server_close()
        self.stdout.write(f"Stopped after {server.stats()['requests']} requests.")

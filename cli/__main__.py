"""`gpu-console` (or `python -m cli`): parse the command line and run one command.

Exit status: 0 success; 2 bad usage or a request the console refused; 69 the console could
not be reached; and for `wait`, the job's outcome: 0 Completed, 1 Failed, 3 Stopped,
4 Preempted, 5 Terminated, 124 timed out.
"""

import argparse
import sys

import cli
from cli import __version__, commands, config, owners, result, submit, usage
from cli.client import ApiFailure, Client

USAGE_OR_REFUSED = 2
UNREACHABLE = 69


def _job_id(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a job id is a number, not {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-console",
        description=cli.__doc__.split("\n\n")[1].replace("\n", " "),
        epilog=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument("--version", action="version", version=f"gpu-console {__version__}")
    p.add_argument("--url", help="the console (default: $GPU_CONSOLE_URL or the config file)")
    p.add_argument("--token", help="an API token (default: $GPU_CONSOLE_TOKEN or the config)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("submit", help="submit a job (flags or -f job.yaml; --array N)")
    submit.add_arguments(s)

    s = sub.add_parser("list", help="list jobs")
    s.add_argument("--status", help="e.g. Running or Pending,Inqueue")
    s.add_argument("--state", choices=["active", "finished"])
    s.add_argument("--quota")
    s.add_argument("--workspace")
    s.add_argument("--owner")
    s.add_argument("--mine", action="store_true", help="only my jobs")
    s.add_argument("--name", help="part of the job name")
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--all", action="store_true", help="every page")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("show", help="a job's details, workers, restarts and events")
    s.add_argument("job", type=_job_id)
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("logs", help="a worker's log, every attempt (-f: follow to the end)")
    s.add_argument("job", type=_job_id)
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("--rank", type=int, default=0)
    s.add_argument(
        "--attempt", type=int, help="only this attempt (with -f: from it on); default: all"
    )

    s = sub.add_parser("stop", help="stop jobs gracefully")
    s.add_argument("jobs", type=_job_id, nargs="+")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("restart", help="submit a finished job again as a new job")
    s.add_argument("job", type=_job_id)
    s.add_argument(
        "--inputs", metavar="VERSION", help="its inputs changed: refused if units would carry"
    )
    s.add_argument(
        "--from-scratch",
        action="store_true",
        help="resume nothing: a folder of its own, no checkpoint, no accepted units carried",
    )
    s.add_argument("--json", action="store_true")

    s = sub.add_parser(
        "quota",
        help="quota usage and your place in the queue; `quota set NAME --gpus N --preview`",
    )
    s.add_argument("name", nargs="?")
    s.add_argument("--json", action="store_true")
    owners.add_arguments(s)

    s = sub.add_parser("wait", help="wait for jobs to finish; exit code = their outcome")
    s.add_argument("jobs", type=_job_id, nargs="+")
    s.add_argument("--timeout", type=float, help="give up after this many seconds (exit 124)")
    s.add_argument("--interval", type=float, default=5.0, help="seconds between looks")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.add_argument("--json", action="store_true")

    usage.add_parser(sub)
    result.add_parser(sub, _job_id)
    result.add_compare_parser(sub, _job_id)

    s = sub.add_parser("whoami", help="who the token belongs to")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("login", help="save the URL and token in the config file")
    s.add_argument("--json", action="store_true")
    return p


COMMANDS = {
    "submit": submit.run,
    "list": commands.cmd_list,
    "show": commands.cmd_show,
    "logs": commands.cmd_logs,
    "stop": commands.cmd_stop,
    "restart": commands.cmd_restart,
    "quota": owners.cmd_quota,
    "wait": commands.cmd_wait,
    "whoami": commands.cmd_whoami,
    "usage": usage.cmd_usage,
    "result": result.cmd_result,
    "compare": result.cmd_compare,
}


def login(args: argparse.Namespace) -> int:
    url = args.url or input("Console URL: ").strip()
    token = args.token or input("API token: ").strip()
    client = Client(url, token)
    me = client.get("/me")  # refuse to save a token that does not work
    path = config.save(config.Config(url.rstrip("/"), token))
    print(f"logged in as {me['username']}; saved to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "login":
            return login(args)
        settings = config.load(args.url, args.token)
        return COMMANDS[args.cmd](Client(settings.url, settings.token), args)
    except config.ConfigError as exc:
        print(f"gpu-console: {exc}", file=sys.stderr)
        return USAGE_OR_REFUSED
    except submit.SpecError as exc:
        print(f"gpu-console: {exc}", file=sys.stderr)
        return USAGE_OR_REFUSED
    except ApiFailure as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"gpu-console: {exc.message}{where}", file=sys.stderr)
        return UNREACHABLE if exc.unreachable else USAGE_OR_REFUSED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

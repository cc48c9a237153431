"""Rendering 1,000 log lines as the job page does: the date filter per line (before) against
times formatted once per chunk by jobs.logview (after). No database.

    .venv/bin/python bench/_fast_logrender.py
"""

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LINE = '<div class="log-line" data-seq="{{ line.seq }}">%s<span class="seq">{{ line.seq }}</span>'
BEFORE = '<time datetime="{{ line.at|date:\'c\' }}">{{ line.at|date:"H:i:s" }}</time>'
AFTER = '<time datetime="{{ line.at_iso }}">{{ line.clock }}</time>'


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.template import engines
    from django.utils import timezone

    from jobs import logview

    now = timezone.now()
    pod = NS(rank=0, attempt=1)
    chunks = [
        NS(
            seq_start=1_000_000 + c * 100,
            seq_end=1_000_000 + c * 100 + 99,
            created_at=now,
            text="".join(f"step {c * 100 + i} loss 0.{i}\n" for i in range(100)),
        )
        for c in range(10)
    ]
    outs = []
    for name, time_tag in [("date filter per line (before)", BEFORE), ("per chunk (after)", AFTER)]:
        loop = "{% for line in log_lines %}" + LINE % time_tag + "{{ line.display }}</div>"
        template = engines["django"].from_string(loop + "{% endfor %}")
        c0 = time.process_time()
        for _ in range(20):
            out = template.render({"log_lines": logview._lines(pod, chunks)})
        cpu = (time.process_time() - c0) / 20 * 1000
        outs.append(out)
        print(f"{name}: {cpu:.1f} ms CPU per 1,000 lines (lines + render)")
    print("same HTML:", outs[0] == outs[1])


if __name__ == "__main__":
    main()

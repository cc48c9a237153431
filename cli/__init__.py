"""`gpu-console`: the researchers' command line for the console's API (no Django).

Submit jobs (flags or a YAML file, `--array N` sweeps), list and show them, follow logs
across restarts, stop, restart, see quota usage and your place in the queue, and `wait`
for jobs with an exit code that mirrors their outcome. Tables for people, `--json` for
scripts. Configured by `GPU_CONSOLE_URL` and `GPU_CONSOLE_TOKEN`, or a config file
(`gpu-console login` writes ~/.config/gpu-console/config.toml).
"""

__version__ = "0.1.0"

"""Automatic Fault Tolerance (docs/fault-tolerance.md): pure policy, failure classification, hang
judgement.

Everything here is a pure function over plain dataclasses, shared by the console (the shell
in jobs.actions and the monitors) and the simulator (`manage.py simulate`).
"""

"""Rank 0's result validator on Kubernetes (docs/results.md, "The validator"): the shell
around `kube.decisions.plan_validation`, used by `kube.controller`.

When rank 0's container ended with exit 0 and its job has a validator, the controller
promotes the units, then creates the validator Pod (`kube.manifest.validator_manifest`,
named after the worker Pod: a second create is AlreadyExists) and marks the worker Pod
(annotation `VALIDATOR_MARK`), so a validator Pod that is gone later is told from one not
made yet. Until the validator ends the worker's exit is not applied: it stays Running. Then
its exit code (from its status) and last lines (from its log; an unreadable log is an empty
report) are rank 0's `ValidatorReport`, applied with the exit as an agent's report is, and
the validator Pod is deleted. Everything is read from the API each step: a restarted
controller finds the validator Pod and waits for it, never creating a second.
"""

import logging
from collections.abc import Callable
from datetime import datetime

import requests

from jobs.folders import output_dir_of
from jobs.models import Pod
from kube import actions
from kube.client import KubeClient, KubeError
from kube.config import KubeConfig
from kube.decisions import Do, Step
from kube.logs import strip_stamp
from kube.manifest import WorkerFacts, validator_manifest, validator_name
from kube.objects import VALIDATOR_CONTAINER, VALIDATOR_MARK, Observed, ValidatorSeen
from kube.starting import result_dir_of, worker_facts
from kube.volumes import promote_units
from protocol import limits
from protocol.agent import ValidatorReport

log = logging.getLogger(__name__)

NO_VOLUME = "no checkpoint volume to run it on (KUBE_CHECKPOINT_CLAIM or KUBE_CHECKPOINT_HOSTPATH)"
NO_MOUNT = "the console does not mount the checkpoint volume (KUBE_CHECKPOINT_ROOT)"


class Validators:
    def __init__(
        self, client: KubeClient, config: KubeConfig, release: Callable[[Observed], None]
    ) -> None:
        self.client, self.config = client, config
        self.release = release  # the worker Pod, once its end is recorded

    def run(self, pod: Pod, api: Observed, step: Step, now: datetime) -> bool:
        """Do.VALIDATE: the units first (the validator sees every one), then the validator
        Pod; Do.JUDGE, or a validator Pod that cannot be made: rank 0's exit 0 with the
        outcome (kube.actions.worker_validated), then both Pods go."""
        if step.do == Do.VALIDATE:
            if self.config.checkpoint_root:
                job = pod.job
                where = (self.config, job.workspace_id, job.pk, job.checkpoint_dir)
                units, here = promote_units(*where, pod.attempt, output_dir_of(job))
                actions.store_extras(pod, [], None, now, units, here)
            why = self.create(worker_facts(pod), api, result_dir_of(self.config, pod))
            if not why:
                return True
            step = Step(Do.JUDGE, why)
        name = validator_name(api.name)
        actions.worker_validated(pod, api.error, self.report(step, name), now)
        self.release(api)
        self.delete(name)
        return True

    def create(self, facts: WorkerFacts, api: Observed, result_dir: str) -> str:
        """Create the validator Pod of worker `api` (AlreadyExists: done) and mark the
        worker Pod. Returns why it cannot be created ("" : created); raises what may pass
        (the API unreachable, a conflict), retried at the next step."""
        if not result_dir:  # the console does not see the volume: no result folder known
            return NO_MOUNT
        manifest = validator_manifest(facts, self.config, api.uid, result_dir)
        if manifest is None:
            return NO_VOLUME
        name = manifest["metadata"]["name"]
        try:
            self.client.create_pod(manifest)
        except KubeError as exc:
            if exc.status in (400, 403, 422):  # refused as written: it will never run
                return f"cannot create the validator's Pod: {exc.message}"
            if exc.reason != "AlreadyExists":
                raise
        self.client.merge_patch_pod(api.name, {"metadata": {"annotations": {VALIDATOR_MARK: name}}})
        log.info("kube: created validator pod %s", name)
        return ""

    def report(self, step: Step, name: str) -> ValidatorReport:
        """The outcome `step` (Do.JUDGE) says, with the validator Pod's last lines."""
        tail = self._tail(name) if step.read_log else ""
        if step.exit_code is None:  # not run: its lines, then why
            return ValidatorReport(exit_code=None, output=f"{tail}\n{step.reason}".strip())
        return ValidatorReport(exit_code=max(-1024, min(1024, step.exit_code)), output=tail)

    def _tail(self, name: str) -> str:
        """The last limits.RESULT_VALIDATOR_LINES lines of its log, at most
        RESULT_VALIDATOR_OUTPUT characters ("" when the log cannot be read)."""
        try:
            raw = self.client.log_tail(
                name,
                VALIDATOR_CONTAINER,
                limits.RESULT_VALIDATOR_LINES,
                limits.KUBE_VALIDATOR_LOG_BYTES,
            )
        except (KubeError, requests.RequestException) as exc:
            log.info("kube: the log of validator %s cannot be read: %s", name, exc)
            return ""
        lines = [strip_stamp(line) for line in raw.rstrip(b"\n").split(b"\n") if line]
        return "\n".join(lines[-limits.RESULT_VALIDATOR_LINES :])[-limits.RESULT_VALIDATOR_OUTPUT :]

    def delete(self, name: str) -> None:
        try:
            self.client.delete_pod(name, 0)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def sweep(self, validators: dict[str, ValidatorSeen], keep: set[str]) -> None:
        """Delete the validator Pods whose worker is no longer live (its exit applied, a
        stop, a loss): what a step that failed after judging left behind."""
        for worker, seen in validators.items():
            if worker in keep:
                continue
            try:
                self.delete(seen.name)
            except Exception:
                log.exception("kube: deleting validator pod %s failed", seen.name)

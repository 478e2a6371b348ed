"""The inline executor: every job runs at once, in this process, on its own snapshot."""

from __future__ import annotations

import copy
from typing import Any

import torch

from p2pfl.executors.base import Done, Executor, Future
from p2pfl.executors.jobs import Job, TrainJob, run_job

__all__ = ["InlineExecutor"]


class InlineExecutor(Executor):
    """Runs each job when it is submitted.

    A training job runs on a copy of the model and of the generator, and its
    outcome waits for the completion time like any other executor's: so a
    responder that reads the live model during the job sees the model from
    before the job, as it would with workers. Evaluations and calls run on their
    live arguments directly (nothing can change them before the job ends).
    """

    name = "inline"

    def submit(self, job: Job) -> Future[Any]:
        if isinstance(job, TrainJob):
            gen = torch.Generator(device=job.generator.device)
            gen.set_state(job.generator.get_state())
            job = copy.copy(job)
            job.model, job.generator = copy.deepcopy(job.model), gen
        out = run_job(job)
        return Done(out)

"""The names every tracker logs under: one definition, documented in ``docs/trackers.md``.

Stage: logging (beside the report). Input: none. Output: the key names, run names and tags that
:mod:`coordcheck.loggers.content` fills and each tracker writes, the same in TensorBoard, MLflow and
W&B. They are part of the interface: dashboards and scripts select on them, so they only grow.

A sweep gives one run per job (named by its directory, ``width=256``; ``width=256,lr=0.01`` in a
transfer grid) and one run named :data:`REPORT_RUN` for its end. ``{seed}``, ``{name}`` are filled in.
"""

from __future__ import annotations

__all__ = ["LOSS", "LOSS_SEED", "HELDOUT_LOSS", "HELDOUT_LOSS_SEED", "ENV", "CONFIG", "JOB", "CONFIG_TEXT", "PARAMS",
           "VERDICT", "VERDICT_STATUS", "VERDICT_PASSED", "REASON", "REPORT", "CAUSES", "TABLE", "FIGURE", "REPORT_RUN",
           "TAG_SWEEP", "TAG_KIND", "TAG_ROLE"]

# -- per job (scalars against the step: 0 = the forward at initialisation, as in the frames) ---------------------------
LOSS = "loss"                          # the training loss at each step, mean over the job's seeds
LOSS_SEED = "loss/seed_{seed}"         # ... of one seed (jobs with several seeds)
HELDOUT_LOSS = "heldout_loss"          # transfer: the held-out loss after training (at step = steps), mean over seeds
HELDOUT_LOSS_SEED = "heldout_loss/seed_{seed}"
ENV = "env/{name}"                     # params: python, torch, mup, hydra, coordcheck, platform, host, device, ...
CONFIG = "config/{name}"               # params: the job's resolved config, one per leaf (config/optimizer._target_)
JOB = "job/{name}"                     # params: status (ok, failed, interrupted), error, seconds, n_params, rows

# -- text (TensorBoard text, MLflow artifact <key>.md, W&B summary) ---------------------------------------------------
CONFIG_TEXT = "config"                # the job's resolved config as YAML
PARAMS = "params"                      # TensorBoard only: the env/config/job params as one table (it has no params)

# -- the end of the sweep, in the REPORT_RUN run -----------------------------------------------------------------------
VERDICT = "verdict"                    # text: "PASS — reason" (coordinate check), "TRANSFERS — reason" (transfer)
VERDICT_STATUS = "verdict/status"      # param: pass | fail | inconclusive; transfers | does not transfer | inconclusive
VERDICT_PASSED = "verdict/passed"      # scalar at step 0: 1 for pass / transfers, else 0
REASON = "verdict/reason"              # param: the verdict's one line
REPORT = "report"                      # text: report.md (transfer.md), the whole report
CAUSES = "causes"                      # text: one line per cause (transfer: one line per parametrization)
TABLE = "table/{name}"                 # tables: slopes, causes (coordinate check); optima, shifts (transfer)
FIGURE = "figure/{name}"               # images: coord_check, slopes, loss, causes; transfer, optimum (PNG)

# -- names and tags ----------------------------------------------------------------------------------------------------
REPORT_RUN = "report"                  # the run name of the sweep's end
TAG_SWEEP = "coordcheck.run.sweep"         # the sweep directory (MLflow tag; the W&B group is its name)
TAG_KIND = "coordcheck.kind"           # coordcheck | transfer
TAG_ROLE = "coordcheck.role"           # job | report (the W&B job_type)

"""The learning-rate sweep's report knobs: ``report.*`` of ``conf/transfer.yaml`` and the flags of its report command.

Stage: the μTransfer experiment's configuration (its twin of :data:`coordcheck.report.knobs.REPORT`). Input: the
fields of :class:`~coordcheck.transfer.fit.TransferRules` and the report's own knobs. Output: :data:`TRANSFER_REPORT`
(a :class:`~coordcheck.report.knobs.Knobs`; its schema ``TransferOptions`` in Hydra's ConfigStore) and the resolver
``coordcheck_not_in_transfer_dirname`` that ``conf/transfer.yaml`` names its job directories with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

from coordcheck.app.config import not_in_dirname
from coordcheck.report.knobs import Knobs, Size
from coordcheck.transfer.fit import TransferRules

__all__ = ["TRANSFER_REPORT", "TransferOptions", "transfer_options"]


TRANSFER_REPORT = Knobs(
    name="transfer_report", schema_name="TransferOptions", rules=TransferRules,
    own=(("figures", bool, True, "draw the figures (transfer, optimum)"),
         ("size", Size, Size.paper, "figure size: a paper column or 16:9 slides"),
         ("strict", bool, False,
          "exit 1 when it does not transfer, 2 when inconclusive, 0 when it transfers (a CI gate)")),
    choices={"size": Size}, module=__name__,
)
TransferOptions = TRANSFER_REPORT.schema


def transfer_options(node: Mapping | None = None, flag: Callable[[str], str] = "report.{}".format) -> dict[str, Any]:
    """The μTransfer sweep's report knobs, checked (:meth:`Knobs.values`)."""
    return TRANSFER_REPORT.values(node, flag)


if not OmegaConf.has_resolver("coordcheck_not_in_transfer_dirname"):  # conf/transfer.yaml's job directory names
    OmegaConf.register_new_resolver("coordcheck_not_in_transfer_dirname", lambda: not_in_dirname(TRANSFER_REPORT))

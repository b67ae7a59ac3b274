"""Context policies, by name: each workflow module registers its classes in WORKFLOWS (memrl.workflows.base)."""

from memrl.workflows.base import WORKFLOWS, LastObservationWorkflow, Workflow
from memrl.workflows.memagent import FullContextWorkflow, MemAgentWorkflow
from memrl.workflows.memalpha import MemAlphaWorkflow
from memrl.workflows.resum import ReSumWorkflow
from memrl.workflows.search import (
    MEM1Workflow,
    MemPOWorkflow,
    MemSearcherWorkflow,
    ReActWorkflow,
    TruncatedReActWorkflow,
)
from memrl.workflows.webshop import WebShopMEM1Workflow, WebShopReActWorkflow, WebShopTruncatedReActWorkflow


def workflow_class(name: str) -> type[Workflow]:
    """The workflow registered as `name`, or the class "module:Name" names."""
    cls = WORKFLOWS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Workflow)):
        raise ValueError(f"env_runners.workflow={name!r} is {cls!r}, not a memrl.workflows.Workflow subclass")
    return cls


__all__ = ["WORKFLOWS", "FullContextWorkflow", "LastObservationWorkflow", "MEM1Workflow", "MemAgentWorkflow",
           "MemAlphaWorkflow", "MemPOWorkflow", "MemSearcherWorkflow", "ReActWorkflow", "ReSumWorkflow",
           "TruncatedReActWorkflow", "WebShopMEM1Workflow", "WebShopReActWorkflow", "WebShopTruncatedReActWorkflow",
           "Workflow", "workflow_class"]

"""Context policies, by name."""

from memrl.workflows.base import LastObservationWorkflow, Workflow
from memrl.workflows.memagent import FullContextWorkflow, MemAgentWorkflow
from memrl.workflows.memalpha import MemAlphaWorkflow
from memrl.workflows.search import (
    MEM1Workflow,
    MemPOWorkflow,
    MemSearcherWorkflow,
    ReActWorkflow,
    TruncatedReActWorkflow,
)
from memrl.workflows.webshop import WebShopMEM1Workflow, WebShopReActWorkflow, WebShopTruncatedReActWorkflow

WORKFLOWS: dict[str, type[Workflow]] = {
    "last_observation": LastObservationWorkflow,
    "memagent": MemAgentWorkflow,
    "full_context": FullContextWorkflow,
    "mem1": MEM1Workflow,
    "memsearcher": MemSearcherWorkflow,
    "mempo": MemPOWorkflow,
    "memalpha": MemAlphaWorkflow,
    "react": ReActWorkflow,
    "react_truncated": TruncatedReActWorkflow,
    "webshop_mem1": WebShopMEM1Workflow,
    "webshop_react": WebShopReActWorkflow,
    "webshop_react_truncated": WebShopTruncatedReActWorkflow,
}
"""Registered workflows; env runners look workflows up here by name."""


def workflow_class(name: str) -> type[Workflow]:
    """The workflow class registered as `name`."""
    if name not in WORKFLOWS:
        raise ValueError(f"unknown workflow {name!r}; registered: {sorted(WORKFLOWS)}")
    return WORKFLOWS[name]

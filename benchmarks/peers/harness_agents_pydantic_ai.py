"""The two-agent workload (delegation.py) in pydantic-ai: agent delegation, a coordinator
tool that awaits the calculator agent's `run` with `usage=ctx.usage` (pydantic-ai's
documented way to count a delegate's usage against the parent's), FunctionModel for both."""

from __future__ import annotations

from typing import Any

from delegation import TASK, USAGE, Brains, Outcome, run_main
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

current: dict[str, Brains] = {}
LIMITS: dict[str, UsageLimits] = {}


def _last_return(messages: list[Any]) -> str | None:
    parts = messages[-1].parts
    returns = [p for p in parts if isinstance(p, ToolReturnPart)]
    return str(returns[-1].content) if returns else None


def coordinator_model(messages: list[Any], info: Any) -> ModelResponse:
    kind, value = current["b"].parent(_last_return(messages))
    usage = RequestUsage(input_tokens=USAGE[0], output_tokens=USAGE[1])
    if kind == "final":
        return ModelResponse(parts=[TextPart(value)], usage=usage)
    return ModelResponse(parts=[ToolCallPart("calculator", {"task": value})], usage=usage)


def calculator_model(messages: list[Any], info: Any) -> ModelResponse:
    task = str(messages[0].parts[-1].content)
    kind, value = current["b"].child(task, _last_return(messages))
    usage = RequestUsage(input_tokens=USAGE[0], output_tokens=USAGE[1])
    if kind == "final":
        return ModelResponse(parts=[TextPart(value)], usage=usage)
    return ModelResponse(parts=[ToolCallPart("add", value)], usage=usage)


calculator = Agent(FunctionModel(calculator_model), instructions="You are a calculator: use add.")
coordinator = Agent(FunctionModel(coordinator_model), instructions="Delegate sums to the calculator.")


@calculator.tool_plain
def add(x: int, y: int) -> int:
    """Add two integers."""
    return current["b"].add(x, y)


@coordinator.tool(name="calculator")
async def calculator_tool(ctx: RunContext[None], task: str) -> str:
    """Ask the calculator agent."""
    # the shared usage counts the coordinator's requests too: the delegate's default
    # request_limit (50) would stop it once the two together made 50, so it gets the parent's
    result = await calculator.run(task, usage=ctx.usage, usage_limits=LIMITS["now"])
    return str(result.output)



def run(brains: Brains) -> Outcome:
    current["b"] = brains
    LIMITS["now"] = UsageLimits(request_limit=3 * brains.n + 2)
    result = coordinator.run_sync(TASK, usage_limits=LIMITS["now"])
    responses = sum(1 for m in result.all_messages() if isinstance(m, ModelResponse))
    usage = result.usage
    return Outcome(str(result.output), usage.total_tokens, usage.requests, responses - (brains.n + 1))


if __name__ == "__main__":
    import pydantic_ai

    run_main("pydantic-ai (agent delegation)", run, {
        "version": pydantic_ai.__version__,
        "resumable": "no: a run is not journaled (durable execution needs the Temporal, DBOS or Prefect integration)",
        "budget_shared": "yes, when the tool passes usage=ctx.usage (UsageLimits then count the delegate's calls)",
    })

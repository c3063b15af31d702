"""A2A (agent-to-agent protocol 1.0): loopwright runs served as A2A tasks (server.py), and
a remote A2A agent used as a tool of a run (client.py).

    import uvicorn
    from loopwright.a2a import app
    uvicorn.run(app(policy, registry, max_steps=6, url="http://127.0.0.1:8000"), port=8000)

Needs the `a2a` extra (a2a-sdk with its HTTP server); `import loopwright` loads none of it.
"""

from loopwright.a2a.client import A2AAgent, A2ATool
from loopwright.a2a.server import (
    LiveRun,
    RunExecutor,
    RunServer,
    agent_card,
    app,
    decision_of,
    tool_skills,
)

__all__ = ["A2AAgent", "A2ATool", "LiveRun", "RunExecutor", "RunServer", "agent_card", "app", "decision_of", "tool_skills"]

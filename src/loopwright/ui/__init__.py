"""Serving a run to a web page: an ASGI app that starts runs, streams each one as AG-UI
protocol events over server-sent events and takes approval answers by POST (server.py), and
the translation of our run events into AG-UI's (agui.py).

    import uvicorn
    from loopwright.ui import app
    uvicorn.run(app(policy, registry, max_steps=6), port=8000)   # or mount it in your app

Needs the `ui` extra (ag-ui-protocol, starlette, uvicorn); `import loopwright` loads none of it.
"""

from loopwright.ui.agui import APPROVAL_DECIDED, APPROVAL_REQUESTED, AGUIMapper
from loopwright.ui.server import LiveRun, RunServer, app

__all__ = ["APPROVAL_DECIDED", "APPROVAL_REQUESTED", "AGUIMapper", "LiveRun", "RunServer", "app"]

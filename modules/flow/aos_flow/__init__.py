"""The flow interpreter's guest package (spec/11): the workflow module `app.py` exports, one
canonical flow definition run to wait per `aos/FlowExec@1` cell. It runs inside the component
and natively in tests; it imports nothing of the host (`aos.*`), only the SDK, the standard
library and the bundled packages (`bundle.txt`)."""

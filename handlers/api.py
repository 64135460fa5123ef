"""The API function: the ASGI app behind API Gateway (HTTP API, payload 2.0), via Mangum."""

from mangum import Mangum

from codeexec.app import create_app

app = create_app()
handler = Mangum(app, lifespan="off")

"""The S3-compatible server of trajstore's object-store tests and benchmark: moto's S3 in server mode
(installed by scripts/setup.sh into .tools/test-python), on loopback, ONE REQUEST AT A TIME.

moto checks a conditional put's precondition (If-None-Match: *, If-Match) and stores the object in
two steps; its own `moto_server` serves requests on threads, so two racing conditional puts could
both pass the check. Served by one thread (HTTP/1.0, a connection per request), every request is
atomic, as S3 guarantees for conditional writes, and the two-writer tests test trajstore, not a race
in the test server.

    .tools/test-python/bin/python scripts/s3-test-server.py PORT   (prints "listening" when ready)
"""
import signal
import sys

from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app


def main() -> None:
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on 127.0.0.1:{server.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

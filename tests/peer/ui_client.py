"""A plain HTTP client for the web app's tests: ``http.client`` in a worker thread, so that a test
can send exactly the headers it means (a foreign ``Host``, a forged ``Origin``), which a browser
would not let it do."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import trio


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class UiClient:
    """Speaks to the app at ``url`` (the address the daemon reports, with its token)."""

    url: str
    cookie: str | None = None
    seen: list[Answer] = field(default_factory=list)

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).netloc

    @property
    def token(self) -> str:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.url).query)["token"][0]

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    async def login(self) -> Answer:
        """Visits the address with the token, as a browser would, and keeps the cookie."""
        answer = await self.request("GET", "/?token=" + self.token, cookie=False)
        self.cookie = answer.headers["set-cookie"].split(";")[0]
        return answer

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | dict | None = None,
        headers: dict[str, str] | None = None,
        cookie: bool = True,
        origin: bool = True,
    ) -> Answer:
        sent = {"Host": self.host}
        if origin and method not in ("GET", "HEAD"):
            sent["Origin"] = self.origin
        if cookie and self.cookie is not None:
            sent["Cookie"] = self.cookie
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        answer = await trio.to_thread.run_sync(self._exchange, method, path, body, sent)
        self.seen.append(answer)
        return answer

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        connection = http.client.HTTPConnection(self.host, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body or b"")))
            connection.endheaders(body)
            response = connection.getresponse()
            return Answer(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read(),
            )
        finally:
            connection.close()

    async def first_event(self, path: str) -> dict:
        """The first ``record`` event of the stream at ``path`` (server-sent events)."""

        def read() -> dict:
            connection = http.client.HTTPConnection(self.host, timeout=30)
            try:
                headers = {"Host": self.host, "Accept": "text/event-stream"}
                if self.cookie is not None:
                    headers["Cookie"] = self.cookie
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                assert response.status == 200, response.read()
                kind = ""
                while True:
                    line = response.fp.readline().decode().rstrip("\n")
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: ") and kind == "record":
                        return json.loads(line.removeprefix("data: "))
            finally:
                connection.close()

        return await trio.to_thread.run_sync(read, abandon_on_cancel=True)

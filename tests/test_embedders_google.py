"""GoogleEmbedder against a fake Gemini API: a real google-genai client whose HTTP goes to
an httpx.MockTransport, so what is checked is the request google-genai actually sends
(path, body) and how a real reply, or a real HTTP error, comes back through it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("google.genai", reason="needs the [adk] extra (google-genai)")

import httpx
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from redis_agent_sessions.errors import EmbeddingError, InvalidInputError
from redis_agent_sessions.memory._embedders import Vectorizer
from redis_agent_sessions.memory._google import KNOWN_DIMENSIONS, GoogleEmbedder

pytestmark = pytest.mark.adk

# No retries, so an HTTP error is one request and the test stays fast whatever
# google-genai's default becomes.
NO_RETRY = types.HttpRetryOptions(attempts=1)


class FakeGemini:
    """Answers batchEmbedContents as the Gemini API does, recording every request.

    Text ``"t<n>"`` gets a vector starting ``[n, 1.0]``, so tests can tell which vector
    belongs to which text."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any], httpx.Headers]] = []
        self.status = 200
        self.drop = 0  # leave this many embeddings off the end of each reply
        self.empty_values = False
        self.closed = False

    def transport(self) -> httpx.MockTransport:
        fake = self

        class Transport(httpx.MockTransport):
            async def aclose(self) -> None:
                fake.closed = True

        return Transport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append((request.url.path, body, request.headers))
        if self.status != 200:
            error = {"code": self.status, "message": "fake failure", "status": "INTERNAL"}
            return httpx.Response(self.status, json={"error": error})
        embeddings = [self.embedding(r) for r in body["requests"]]
        return httpx.Response(200, json={"embeddings": embeddings[: len(embeddings) - self.drop]})

    def embedding(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.empty_values:
            return {}
        model = req["model"].removeprefix("models/")
        dims = req.get("outputDimensionality", KNOWN_DIMENSIONS.get(model, 8))
        text = req["content"]["parts"][0]["text"]
        n = float(text[1:]) if text[1:].isdigit() else 0.0
        return {"values": [n, 1.0] + [0.5] * (dims - 2)}

    def texts(self, i: int) -> list[str]:
        return [r["content"]["parts"][0]["text"] for r in self.requests[i][1]["requests"]]


@pytest.fixture
def fake() -> FakeGemini:
    return FakeGemini()


@pytest.fixture
async def http(fake: FakeGemini) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=fake.transport()) as client:
        yield client


@pytest.fixture
def client(http: httpx.AsyncClient) -> genai.Client:
    options = types.HttpOptions(httpx_async_client=http, retry_options=NO_RETRY)
    made = genai.Client(api_key="test-key", http_options=options)
    made.close()  # the sync half, never used here
    return made


async def test_embed_sends_texts_model_and_document_task(
    fake: FakeGemini, client: genai.Client
) -> None:
    embedder = GoogleEmbedder(client=client)
    vectors = await embedder.embed(["t1", "t2"])
    assert [v[:2] for v in vectors] == [[1.0, 1.0], [2.0, 1.0]]
    assert all(len(v) == 3072 for v in vectors)
    [(path, body, headers)] = fake.requests
    assert path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert headers["x-goog-api-key"] == "test-key"
    assert body == {
        "requests": [
            {
                "content": {"parts": [{"text": text}], "role": "user"},
                "taskType": "RETRIEVAL_DOCUMENT",
                "model": "models/gemini-embedding-001",
            }
            for text in ("t1", "t2")
        ]
    }


async def test_embed_query_uses_the_query_task(fake: FakeGemini, client: genai.Client) -> None:
    await GoogleEmbedder(client=client).embed_query(["t1"])
    assert [r["taskType"] for r in fake.requests[0][1]["requests"]] == ["RETRIEVAL_QUERY"]


async def test_task_types_can_be_left_out(fake: FakeGemini, client: genai.Client) -> None:
    embedder = GoogleEmbedder(client=client, document_task=None, query_task="QUESTION_ANSWERING")
    await embedder.embed(["t1"])
    await embedder.embed_query(["t1"])
    assert "taskType" not in fake.requests[0][1]["requests"][0]
    assert fake.requests[1][1]["requests"][0]["taskType"] == "QUESTION_ANSWERING"


async def test_dimensions_given_are_asked_for(fake: FakeGemini, client: genai.Client) -> None:
    embedder = GoogleEmbedder("models/gemini-embedding-001", dimensions=256, client=client)
    assert embedder.dimensions == 256
    assert embedder.name == "google:gemini-embedding-001:256"
    vectors = await embedder.embed_query(["t1", "t2"])
    assert [len(v) for v in vectors] == [256, 256]
    [(path, body, _)] = fake.requests
    assert path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert [r["outputDimensionality"] for r in body["requests"]] == [256, 256]


async def test_batches_go_in_order(fake: FakeGemini, client: genai.Client) -> None:
    texts = [f"t{i}" for i in range(250)]
    vectors = await GoogleEmbedder(client=client, batch_size=100, dimensions=4).embed(texts)
    assert [len(body["requests"]) for _, body, _ in fake.requests] == [100, 100, 50]
    assert [t for i in range(3) for t in fake.texts(i)] == texts
    assert [v[0] for v in vectors] == [float(i) for i in range(250)]


async def test_no_texts_send_no_request(fake: FakeGemini, client: genai.Client) -> None:
    assert await GoogleEmbedder(client=client).embed([]) == []
    assert fake.requests == []


@pytest.mark.parametrize("model", sorted(KNOWN_DIMENSIONS))
async def test_known_models_need_no_dimensions(model: str, client: genai.Client) -> None:
    for name in (model, f"models/{model}"):
        embedder = GoogleEmbedder(name, client=client)
        assert embedder.dimensions == KNOWN_DIMENSIONS[model]
        assert embedder.name == f"google:{model}:{KNOWN_DIMENSIONS[model]}"


async def test_an_unknown_model_needs_dimensions(fake: FakeGemini, client: genai.Client) -> None:
    with pytest.raises(InvalidInputError, match=r"dimensions="):
        GoogleEmbedder("my-embedder", client=client)
    embedder = GoogleEmbedder("my-embedder", dimensions=8, client=client)
    assert embedder.name == "google:my-embedder:8"
    assert len((await embedder.embed(["t1"]))[0]) == 8
    assert fake.requests[0][0] == "/v1beta/models/my-embedder:batchEmbedContents"
    assert fake.requests[0][1]["requests"][0]["outputDimensionality"] == 8


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dimensions": 0},
        {"dimensions": True},
        {"dimensions": 40_000},
        {"batch_size": 0},
        {"batch_size": 2.0},
        {"model": ""},
        {"model": "models/"},
        {"document_task": ""},
        {"client": object()},
    ],
)
def test_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        GoogleEmbedder(**kwargs)


async def test_too_few_embeddings(fake: FakeGemini, client: genai.Client) -> None:
    fake.drop = 1
    with pytest.raises(EmbeddingError, match=r"returned 1 embeddings for 2 texts"):
        await GoogleEmbedder(client=client, dimensions=4).embed(["t1", "t2"])


async def test_an_embedding_without_values(fake: FakeGemini, client: genai.Client) -> None:
    fake.empty_values = True
    with pytest.raises(EmbeddingError, match=r"no values for text 0"):
        await GoogleEmbedder(client=client, dimensions=4).embed(["t1"])


@pytest.mark.parametrize("status", [400, 500])
async def test_http_errors_surface(status: int, fake: FakeGemini, client: genai.Client) -> None:
    fake.status = status
    embedder = GoogleEmbedder(client=client, dimensions=4)
    with pytest.raises(genai_errors.APIError) as raised:
        await embedder.embed(["t1"])
    assert raised.value.code == status
    with pytest.raises(EmbeddingError, match=rf"google:gemini-embedding-001:4.*{status}"):
        await Vectorizer(embedder).documents(["t1"])
    assert len(fake.requests) == 2  # once each: nothing retried


async def test_through_the_vectorizer(fake: FakeGemini, client: genai.Client) -> None:
    vectorizer = Vectorizer(GoogleEmbedder(client=client))
    assert vectorizer.name == "google:gemini-embedding-001:3072"
    [blob] = await vectorizer.documents(["t3"])
    assert len(blob) == 4 * 3072
    await vectorizer.query("t3")
    assert [body["requests"][0]["taskType"] for _, body, _ in fake.requests] == [
        "RETRIEVAL_DOCUMENT",
        "RETRIEVAL_QUERY",
    ]


async def test_aclose_leaves_a_client_passed_in_open(
    fake: FakeGemini, http: httpx.AsyncClient, client: genai.Client
) -> None:
    embedder = GoogleEmbedder(client=client, dimensions=4)
    await embedder.aclose()
    assert not http.is_closed
    assert not fake.closed
    await embedder.embed(["t1"])
    assert len(fake.requests) == 1


async def test_a_client_it_makes_is_made_on_first_use_and_closed(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[genai.Client] = []
    real_client = genai.Client

    def from_environment() -> genai.Client:
        # As genai.Client() from the environment, with this test's transport: google-genai
        # builds (and owns) the httpx client around it.
        options = types.HttpOptions(
            async_client_args={"transport": fake.transport()}, retry_options=NO_RETRY
        )
        made.append(real_client(api_key="test-key", http_options=options))
        return made[-1]

    monkeypatch.setattr(genai, "Client", from_environment)
    embedder = GoogleEmbedder(dimensions=4)
    assert made == []
    await embedder.embed(["t1"])
    await embedder.embed_query(["t2"])
    assert len(made) == 1
    assert len(fake.requests) == 2
    await embedder.aclose()
    assert fake.closed
    await embedder.aclose()  # twice is fine
    fake.closed = False
    await embedder.embed(["t3"])  # a new one after closing
    assert len(made) == 2
    await embedder.aclose()
    assert fake.closed


async def test_vertex_gemini_models_get_one_text_per_request() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def vertex(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        values = [float(body["instances"][0]["content"][1:]), 1.0, 0.5, 0.5]
        return httpx.Response(200, json={"predictions": [{"embeddings": {"values": values}}]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(vertex)) as http:
        options = types.HttpOptions(httpx_async_client=http, retry_options=NO_RETRY)
        client = genai.Client(vertexai=True, api_key="test-key", http_options=options)
        client.close()
        vectors = await GoogleEmbedder(client=client, dimensions=4).embed(["t1", "t2", "t3"])
    assert [v[0] for v in vectors] == [1.0, 2.0, 3.0]
    assert [path for path, _ in seen] == [
        "/v1beta1/publishers/google/models/gemini-embedding-001:predict"
    ] * 3
    assert seen[0][1] == {
        "instances": [{"content": "t1", "task_type": "RETRIEVAL_DOCUMENT"}],
        "parameters": {"outputDimensionality": 4},
    }


def test_without_google_genai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    with pytest.raises(InvalidInputError, match=r"\[adk\]"):
        GoogleEmbedder()


def test_importing_the_module_does_not_import_google_genai() -> None:
    code = (
        "import sys, redis_agent_sessions.memory._google; "
        "assert 'google.genai' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

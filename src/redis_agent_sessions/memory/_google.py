"""Google's embedding models (Gemini API or Vertex AI) as an [`Embedder`][].

google-genai is not a core dependency (it comes with google-adk, in the ``[adk]`` extra),
so it is imported when an embedder is made, never when this module is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from redis_agent_sessions.errors import EmbeddingError, InvalidInputError
from redis_agent_sessions.memory._embedders import check_batch_size, check_dimensions

if TYPE_CHECKING:
    from google import genai

__all__ = ["GoogleEmbedder"]

# What each model returns when no output_dimensionality is asked for.
KNOWN_DIMENSIONS = {
    "text-embedding-004": 768,
    "text-embedding-005": 768,
    "text-multilingual-embedding-002": 768,
    "gemini-embedding-001": 3072,
}


def _require_genai() -> None:
    try:
        import google.genai  # noqa: F401
    except ImportError as exc:
        raise InvalidInputError(
            "GoogleEmbedder needs google-genai, which comes with google-adk: "
            "pip install 'redis-agent-sessions[adk]'"
        ) from exc


class GoogleEmbedder:
    """Vectors from Google's embedding models through ``client.aio.models.embed_content``.

    Documents and queries are embedded with different task types (``RETRIEVAL_DOCUMENT``
    and ``RETRIEVAL_QUERY``), which these models are trained to match against each other.

    Args:
        model: the embedding model, with or without the ``models/`` prefix.
        dimensions: asked of the model as ``output_dimensionality`` (the Gemini models
            shorten their vectors on request); None takes the model's own size, known for
            the models in ``KNOWN_DIMENSIONS`` only.
        client: a ``google.genai.Client``, left open by [`aclose`][] (its owner closes
            it). None makes one from the environment (``GOOGLE_API_KEY``, or
            ``GOOGLE_GENAI_USE_VERTEXAI`` with a project and location) on first use.
        batch_size: most texts per request; the Gemini API takes up to 100, Vertex AI up
            to 250, but one only for its Gemini models (sent one by one whatever this is).
        document_task: the task type for ``embed``; None sends none (the model's
            default).
        query_task: the task type for ``embed_query``; None sends none.
    """

    def __init__(
        self,
        model: str = "gemini-embedding-001",
        *,
        dimensions: int | None = None,
        client: Any = None,
        batch_size: int = 100,
        document_task: str | None = "RETRIEVAL_DOCUMENT",
        query_task: str | None = "RETRIEVAL_QUERY",
    ) -> None:
        # Fail where the embedder is configured, not on the first memory written.
        _require_genai()
        if not isinstance(model, str) or not model.removeprefix("models/"):
            raise InvalidInputError(f"model must be a non-empty string, got {model!r}")
        check_batch_size(batch_size)
        for task in (document_task, query_task):
            if task is not None and (not isinstance(task, str) or not task):
                raise InvalidInputError(f"task types must be non-empty strings, got {task!r}")
        if client is not None and not hasattr(client, "aio"):
            raise InvalidInputError(
                f"client must be a google.genai.Client, got {type(client).__name__}"
            )
        short = model.removeprefix("models/")
        if dimensions is None:
            if short not in KNOWN_DIMENSIONS:
                raise InvalidInputError(
                    f"the dimensions of {model!r} are not known: pass dimensions= (the "
                    "length of its vectors, or the length to ask it for)"
                )
            self.dimensions = KNOWN_DIMENSIONS[short]
        else:
            self.dimensions = check_dimensions(dimensions)
        self._output_dimensionality = dimensions
        self.model = model
        # Without the prefix, so one model named both ways does not count as two and
        # send every stored vector to be re-embedded.
        self.name = f"google:{short}:{self.dimensions}"
        self.batch_size = batch_size
        self.document_task = document_task
        self.query_task = query_task
        self._client: genai.Client | None = client
        self._owns_client = client is None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._embed(texts, self.document_task)

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._embed(texts, self.query_task)

    async def aclose(self) -> None:
        """Close the client this embedder made; one passed in is its owner's to close."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None  # a later call makes a new one
            client.close()  # its sync half: genai.Client opens both
            await client.aio.aclose()

    def _get_client(self) -> genai.Client:
        if self._client is None:
            from google import genai

            self._client = genai.Client()
        return self._client

    async def _embed(self, texts: Sequence[str], task: str | None) -> list[list[float]]:
        from google.genai import types

        config = types.EmbedContentConfig(
            task_type=task, output_dimensionality=self._output_dimensionality
        )
        client = self._get_client()
        # Vertex AI takes one text per request for its Gemini models: gemini-embedding-001
        # answers more with a 400, and google-genai refuses more for the newer ones.
        size = 1 if client.vertexai and "gemini" in self.model else self.batch_size
        out: list[list[float]] = []
        # One batch at a time: a burst of concurrent requests is what trips the per-minute
        # quotas, and google-genai does not retry a 429 unless told to; re-embedding a
        # whole store is a background job where throughput matters less than finishing.
        for start in range(0, len(texts), size):
            batch = list(texts[start : start + size])
            response = await client.aio.models.embed_content(
                # A cast, not a conversion: google-genai's contents union lists str only
                # inside invariant lists of wider element types since 2.34.
                model=self.model,
                contents=cast("types.ContentListUnion", batch),
                config=config,
            )
            embeddings = response.embeddings or []
            if len(embeddings) != len(batch):
                raise EmbeddingError(
                    f"{self.name} returned {len(embeddings)} embeddings for {len(batch)} "
                    f"texts (texts {start} to {start + len(batch) - 1})"
                )
            for i, embedding in enumerate(embeddings, start):
                if not embedding.values:
                    raise EmbeddingError(f"{self.name} returned no values for text {i}")
                out.append(list(embedding.values))
        return out

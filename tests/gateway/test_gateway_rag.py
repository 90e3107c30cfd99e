"""The OpenVINO Model Server demo's RAG chain, built with langchain entirely against the gateway:
``OpenAIEmbeddings`` -> ``InMemoryVectorStore`` -> retriever -> ``ChatOpenAI``, on the real engine
serving all-MiniLM-L6-v2 and the chat model. Retrieval is checked, not the model's wording.

``OpenAIEmbeddings`` tokenises with tiktoken by default and sends token ids, which mean nothing to
BERT's 30522-word vocabulary: ``check_embedding_ctx_length=False`` makes it send the text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cohere
import openai
import pytest
import tiktoken
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_cohere import CohereRerank
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

from support.embeddings_mesh import Mesh
from support.servers import EMBEDDING_NAME, MODEL_NAME

RAG = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "rag" / "documents.json").read_text())
PROMPT = ChatPromptTemplate.from_template("Answer from the context.\nContext: {context}\nQuestion: {question}")


def _embeddings(mesh: Mesh, secret: str, **extra: Any) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(
        model=EMBEDDING_NAME, base_url=mesh.gateway.url + "/v1", api_key=secret, max_retries=0, **extra
    )


def _text(docs: list[Document]) -> str:
    return "\n".join(d.page_content for d in docs)


def test_the_rag_chain_retrieves_the_right_document_for_each_question(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    docs = RAG["documents"]
    store = InMemoryVectorStore.from_texts(
        [d["text"] for d in docs],
        _embeddings(mesh, secret, check_embedding_ctx_length=False),
        metadatas=[{"id": d["id"]} for d in docs],
    )
    retriever = store.as_retriever(search_kwargs={"k": 1})
    llm = ChatOpenAI(model=MODEL_NAME, base_url=mesh.gateway.url + "/v1", api_key=secret, max_tokens=12, temperature=0)
    answer = ({"context": lambda x: _text(x["docs"]), "question": lambda x: x["question"]}) | PROMPT | llm
    chain = {"docs": retriever, "question": RunnablePassthrough()} | RunnablePassthrough.assign(
        answer=answer | StrOutputParser()
    )
    questions = RAG["questions"]
    results = chain.batch([q["question"] for q in questions])
    assert [r["docs"][0].metadata["id"] for r in results] == [q["document"] for q in questions]
    assert all(isinstance(r["answer"], str) for r in results)  # the chat model answered each through the gateway


def _tiktoken_available() -> bool:
    try:
        tiktoken.get_encoding("cl100k_base")  # its BPE file comes from the network the first time
    except Exception:
        return False
    return True


def test_token_ids_from_another_vocabulary_are_a_400_naming_input(embeddings_mesh: Mesh) -> None:
    """langchain's default (tiktoken ids) must fail loudly, never embed as wrong vectors. Where
    tiktoken cannot fetch cl100k_base (no network), ids of a 100k-token vocabulary are sent as
    langchain sends them (a list of id lists) with the openai SDK instead."""
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    if _tiktoken_available():
        with pytest.raises(openai.BadRequestError) as refused:
            _embeddings(mesh, secret).embed_documents([d["text"] for d in RAG["documents"]])
    else:
        ids = [[791, 5274, 315, 45348, 374, 264, 1317, 61120, 1005, 13], [34415, 2740, 79338, 13]]
        with pytest.raises(openai.BadRequestError) as refused:
            mesh.client(secret).embeddings.create(model=EMBEDDING_NAME, input=ids, encoding_format="base64")
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["param"] == "input"
    assert "vocabulary" in error["message"]


# The OVMS notebook's prompt (demos/continuous_batching/rag/rag_demo.ipynb), word for word
NOTEBOOK_PROMPT = PromptTemplate(
    input_variables=["context", "question"],
    template="You are an assistant for question-answering tasks. Use the following pieces of retrieved context "
    "to answer the question. If you don't know the answer, just say that you don't know.\nQuestion: {question} "
    "\nContext: {context} \nAnswer:",
)


def test_the_ovms_notebook_chain_runs_through_the_gateways_v3_paths(embeddings_mesh: Mesh) -> None:
    """The notebook's chain as its users run it, every client on the gateway's ``/v3``: FAISS over
    ``OpenAIEmbeddings``, a ``ContextualCompressionRetriever`` whose compressor is
    ``langchain_cohere.CohereRerank(top_n=1)`` on ``cohere.ClientV2(base_url=".../v3/")`` (the rerank
    model: all-MiniLM-L6-v2 as a cosine scorer), and ``ChatOpenAI`` streaming the answer. Two changes,
    both forced by this machine: the documents are written here (the notebook fetches web pages), and
    ``OpenAIEmbeddings`` sends text (``check_embedding_ctx_length=False``: the notebook's
    ``tiktoken_enabled=False`` loads a Hugging Face tokenizer from the hub)."""
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    base = mesh.gateway.url + "/v3"
    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    documents = [Document(page_content=d["text"], metadata={"id": d["id"]}) for d in RAG["documents"]]
    texts = splitter.split_documents(documents)
    embeddings = OpenAIEmbeddings(
        model=EMBEDDING_NAME, api_key=secret, base_url=base, check_embedding_ctx_length=False, max_retries=0
    )
    db = FAISS.from_documents(texts, embeddings)
    retriever = db.as_retriever(search_kwargs={"k": 5})
    co = cohere.ClientV2(api_key=secret, base_url=base + "/")
    compressor = CohereRerank(model=EMBEDDING_NAME, client=co, top_n=1)
    compression_retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=retriever)
    assert len(retriever.invoke(RAG["questions"][0]["question"])) == 5
    for q in RAG["questions"]:
        reranked = compression_retriever.invoke(q["question"])
        assert [d.metadata["id"] for d in reranked] == [q["document"]], q["question"]
        assert 0.0 < reranked[0].metadata["relevance_score"] <= 1.0
    llm = ChatOpenAI(api_key=secret, base_url=base, model=MODEL_NAME, max_tokens=16, temperature=0, max_retries=0)

    def format_docs(docs: list[Document]) -> str:
        return "\n\n".join(doc.page_content for doc in docs)

    rag_chain = (
        {"context": compression_retriever | format_docs, "question": RunnablePassthrough()}
        | NOTEBOOK_PROMPT
        | llm
        | StrOutputParser()
    )
    chunks = list(rag_chain.stream(RAG["questions"][0]["question"]))
    assert chunks, "the chain streamed nothing"
    assert all(isinstance(c, str) for c in chunks)

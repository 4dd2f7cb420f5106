"""A-RAG's agent prompt and tool descriptions, verbatim from ``Ayanami0730/arag`` at a44de6b (MIT License, declared in
its ``pyproject.toml`` and README; https://github.com/Ayanami0730/arag): ``src/arag/agent/prompts/default.txt`` (the
system prompt ``scripts/batch_runner.py`` reads), ``src/arag/agent/base.py`` (``_force_final_answer``) and the
``get_schema`` descriptions of ``src/arag/tools/keyword_search.py``, ``read_chunk.py`` and ``semantic_search.py``.

Changes from upstream (each for a stated reason):
  - ``SYSTEM_PROMPT`` has one line of ours after its first, "The corpus is the record of your earlier conversations
    with this user, {corpus}." (``CORPUS_DESCRIPTIONS`` in ``systems/a_rag.py`` says what a chunk is): upstream's
    corpus is Wikipedia-like documents, ours the user's own conversations with the assistant, and a query such as
    "what should I pack?" cannot be read against a corpus the agent does not know is that record;
  - the two ``top_k`` descriptions' "(default: 5, max: 20)" are filled from the system's ``default_top_k`` and
    ``max_top_k`` parameters (upstream's values by default), so the text states what the tools do.
"""

PROMPTS_VERSION = "a_rag-upstream-a44de6b-v1"

#: ``default.txt`` (read whole, its final newline included), with the one line of ours (see above)
SYSTEM_PROMPT = """You are a question-answering assistant with access to a document corpus through available tools.
The corpus is the record of your earlier conversations with this user, {corpus}.

Your goal is to answer questions accurately by finding and analyzing relevant information from the provided documents.

## Available Tools

- **keyword_search**: Find chunks by exact keyword matching
- **semantic_search**: Find chunks by semantic similarity
- **read_chunk**: Read the full content of a specific chunk

## Strategy

Work iteratively: search → read → evaluate → search → read → ... → answer. For multi-hop questions, decompose the problem and tackle each sub-question step by step.

## When Answering

- Ground your response in the retrieved documents
- Cite the specific chunks that support your answer
- Provide clear, direct answers supported by evidence
- Avoid speculation beyond what the documents support
"""

#: ``BaseAgent._force_final_answer``'s ``force_prompt``
FORCE_ANSWER_PROMPT = (
    "You have reached the limit. "
    "You MUST now provide a final answer based on the information you have gathered so far. "
    "Do NOT call any more tools. Synthesize the available information and respond directly."
)

#: ``KeywordSearchTool.get_schema``
KEYWORD_SEARCH_DESCRIPTION = """Search for document chunks using keyword-based exact text matching (case-insensitive). Returns chunk IDs and abbreviated sentence snippets where the keywords appear.

IMPORTANT: This tool matches keywords literally in the text. Use SHORT, SPECIFIC terms (1-3 words maximum). Each keyword is matched independently.

Examples of GOOD keywords:
  - Entity names: "Albert Einstein", "Tesla", "Python", "Argentina"
  - Technical terms: "photosynthesis", "quantum mechanics"
  - Key concepts: "climate change", "GDP growth"

Examples of BAD keywords (DO NOT use):
  - Long phrases: "the person who invented the telephone" → use "Alexander Bell" instead
  - Questions: "when did World War 2 start" → use "World War 2", "1939" instead
  - Descriptions: "the country between France and Spain" → use "Andorra" instead
  - Full sentences: "how does the stock market work" → use "stock market", "trading" instead

RETURNS: Abbreviated snippets marked with "..." showing where keywords appear. These snippets help you identify relevant chunks, but you MUST use read_chunk to get the full text for answering questions."""
KEYWORDS_PARAMETER = "List of keywords to search. Each keyword should be 1-3 words maximum (e.g., ['Einstein', 'relativity theory', '1905'])."
KEYWORD_TOP_K_PARAMETER = "Number of top-ranked chunks to return (default: {default_top_k}, max: {max_top_k})"

#: ``ReadChunkTool.get_schema``
READ_CHUNK_DESCRIPTION = """Read the complete content of document chunks by their IDs.

This tool returns the full text of the specified chunks, allowing you to examine the complete context and details that are not visible in search snippets.

IMPORTANT: Search results (keyword_search and semantic_search) only show abbreviated snippets marked with "..." - they are NOT sufficient for answering questions. You MUST use read_chunk to get the full content before formulating your answer.

STRATEGY:
- Always read promising chunks identified by your searches
- Make sure to read the most relevant chunks to gather complete information
- If information seems incomplete or truncated, read adjacent chunks (± 1)
- Reading full text is essential for accurate answers

Note: Previously read chunks will be marked as already seen to avoid redundant information."""
CHUNK_IDS_PARAMETER = "List of chunk IDs to retrieve (e.g., ['0', '24', '172'])"

#: ``SemanticSearchTool.get_schema``
SEMANTIC_SEARCH_DESCRIPTION = """Semantic search using embedding similarity. Matches your query against sentences in each chunk via vector similarity.

WHEN TO USE:
- When keyword search fails to find relevant information
- When exact wording in documents is unknown
- For conceptual/meaning-based matching

RETURNS: Abbreviated snippets with matched sentences. Use read_chunk to get full text for answering."""
QUERY_PARAMETER = "Natural language query describing what information you're looking for"
SEMANTIC_TOP_K_PARAMETER = "Number of most relevant results to return (default: {default_top_k}, max: {max_top_k})"

"""A-Mem's prompts, verbatim from ``WujiangXu/A-mem`` at 0c8039f (MIT License, "Copyright (c) 2025 Wujiang Xu,
Zujie Liang, Kai Mei, Hang Gao, Juntao Tan, Yongfeng Zhang"; https://github.com/WujiangXu/A-mem), the paper's
reproduction: ``memory_layer.py`` (``LLMController``'s system message, ``MemoryNote.analyze_content``,
``AgenticMemorySystem.evolution_system_prompt``) and ``test_advanced.py`` (``advancedMemAgent.generate_query_llm``,
``answer_question``'s prompt for categories 1 and 4, the default branch). Upstream's indentation is kept: it is
part of what upstream sends.

Changes from upstream (each for a stated reason):
  - upstream's f-strings are ``str.format`` templates with the same ``{{ }}`` escapes (the rendered text is
    upstream's); ``ANALYZE_PROMPT`` is a prefix the note's content is appended to, as upstream concatenates it;
  - ``ANSWER_SYSTEM_PROMPT`` (ours) names the reply's one key: upstream asks for ``{"answer": ...}`` through a
    strict json_schema response format, which OpenAI-compatible servers do not all honour, so the answer call uses
    json_object mode and the prompt must say the key. The other calls' prompts already describe their JSON, so
    they keep upstream's system message (``JSON_SYSTEM_PROMPT``) and text unchanged.
"""

PROMPTS_VERSION = "a_mem-upstream-0c8039f-v1"

#: ``LLMController``: the system message of every call upstream makes
JSON_SYSTEM_PROMPT = "You must respond with a JSON object."

#: ``MemoryNote.analyze_content``: the note's content is appended (``prompt = """...""" + content``)
ANALYZE_PROMPT = """Generate a structured analysis of the following content by:
            1. Identifying the most salient keywords (focus on nouns, verbs, and key concepts)
            2. Extracting core themes and contextual elements
            3. Creating relevant categorical tags

            Format the response as a JSON object:
            {
                "keywords": [
                    // several specific, distinct keywords that capture key concepts and terminology
                    // Order from most to least important
                    // Don't include keywords that are the name of the speaker or time
                    // At least three keywords, but don't be too redundant.
                ],
                "context": 
                    // one sentence summarizing:
                    // - Main topic/domain
                    // - Key arguments/points
                    // - Intended audience/purpose
                ,
                "tags": [
                    // several broad categories/themes for classification
                    // Include domain, format, and type tags
                    // At least three tags, but don't be too redundant.
                ]
            }

            Content for analysis:
            """

#: ``AgenticMemorySystem.__init__``: ``evolution_system_prompt``, filled by ``process_memory``
EVOLUTION_PROMPT = '''
                                You are an AI memory evolution agent responsible for managing and evolving a knowledge base.
                                Analyze the the new memory note according to keywords and context, also with their several nearest neighbors memory.
                                Make decisions about its evolution.  

                                The new memory context:
                                {context}
                                content: {content}
                                keywords: {keywords}

                                The nearest neighbors memories:
                                {nearest_neighbors_memories}

                                Based on this information, determine:
                                1. Should this memory be evolved? Consider its relationships with other memories.
                                2. What specific actions should be taken (strengthen, update_neighbor)?
                                   2.1 If choose to strengthen the connection, which memory should it be connected to? Can you give the updated tags of this memory?
                                   2.2 If choose to update_neighbor, you can update the context and tags of these memories based on the understanding of these memories. If the context and the tags are not updated, the new context and tags should be the same as the original ones. Generate the new context and tags in the sequential order of the input neighbors.
                                Tags should be determined by the content of these characteristic of these memories, which can be used to retrieve them later and categorize them.
                                Note that the length of new_tags_neighborhood must equal the number of input neighbors, and the length of new_context_neighborhood must equal the number of input neighbors.
                                The number of neighbors is {neighbor_number}.
                                Return your decision in JSON format with the following structure:
                                {{
                                    "should_evolve": True or False,
                                    "actions": ["strengthen", "update_neighbor"],
                                    "suggested_connections": ["neighbor_memory_ids"],
                                    "tags_to_update": ["tag_1",..."tag_n"], 
                                    "new_context_neighborhood": ["new context",...,"new context"],
                                    "new_tags_neighborhood": [["tag_1",...,"tag_n"],...["tag_1",...,"tag_n"]],
                                }}
                                '''

#: ``advancedMemAgent.generate_query_llm``
QUERY_KEYWORDS_PROMPT = """Given the following question, generate several keywords, using 'cosmos' as the separator.

                Question: {question}

                Format your response as a JSON object with a "keywords" field containing the selected text. 

                Example response format:
                {{"keywords": "keyword1, keyword2, keyword3"}}"""

#: ours: the json_object replacement of upstream's strict ``{"answer": string}`` schema (see the module docstring)
ANSWER_SYSTEM_PROMPT = 'You must respond with a JSON object of the form {"answer": "<your answer>"}.'

#: ``advancedMemAgent.answer_question``, the prompt of LoCoMo categories 1 and 4 (the ``else`` branch)
ANSWER_PROMPT = """Based on the context: {context}, write an answer in the form of a short phrase for the following question. Answer with exact words from the context whenever possible.

                            Question: {question} Short answer:
                            """

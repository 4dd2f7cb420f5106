"""xMemory's memory-call prompts, verbatim from ``HU-xiaobai/xMemory`` at 375ae14 (MIT License, "Copyright (c) 2026
HU-xiaobai"; https://github.com/HU-xiaobai/xMemory): ``src/generation/prompts.py`` (``PromptTemplates``'
``BOUNDARY_DETECTION_PROMPT``, ``EPISODE_GENERATION_PROMPT``, ``PREDICTION_PROMPT``,
``EXTRACT_KNOWLEDGE_FROM_COMPARISON_PROMPT``) and ``src/generation/prediction_correction_engine.py``
(``_cold_start_extraction``'s inline prompt). Each is sent, as upstream does, as the one user message of its call.

Changes from upstream (none to the rendered text): the placeholders are named as ``systems/xmemory.py`` fills them
(upstream's ``conversation_history``/``new_messages`` -> ``history``/``new``, ``boundary_reason`` -> ``reason``,
``episode_title``/``knowledge_statements`` -> ``title``/``statements``, ``original_messages``/``predicted_episode``
-> ``messages``/``prediction``), and the cold-start f-string's ``episode.title``, ``episode.content`` and
``episode.timestamp.strftime("%Y-%m-%d")`` are ``{title}``, ``{content}`` and ``{date}`` of a ``str.format`` template
(same ``{{ }}`` escapes). Below them: the theme, gate and answer prompts (upstream's answer prompt from
``evaluation/locomo/xMemory_search_framework.py``, dedented) and the no-knowledge prediction text.
"""

PROMPTS_VERSION = "xmemory-upstream-375ae14-v1"

#: ``PromptTemplates.BOUNDARY_DETECTION_PROMPT`` (``get_boundary_detection_prompt``)
BOUNDARY_PROMPT = """
You are a dialogue boundary detection expert. You need to determine if the newly added dialogue should end the current episode and start a new one.

Current conversation history:
{history}

Newly added messages:
{new}

Please carefully analyze the following aspects to determine if a new episode should begin:

1. **Topic Change** (Highest Priority):
   - Do the new messages introduce a completely different topic?
   - Is there a shift from one specific event to another?
   - Has the conversation moved from one question to an unrelated new question?

2. **Intent Transition**:
   - Has the purpose of the conversation changed? (e.g., from casual chat to seeking help, from discussing work to discussing personal life)
   - Has the core question or issue of the current topic been answered or fully discussed?

3. **Temporal Markers**:
   - Are there temporal transition markers ("earlier", "before", "by the way", "oh right", "also", etc.)?
   - Is the time gap between messages more than 30 minutes?

4. **Structural Signals**:
   - Are there explicit topic transition phrases ("changing topics", "speaking of which", "quick question", etc.)?
   - Are there concluding statements indicating the current topic is finished?

5. **Content Relevance**:
   - How related is the new message to the previous discussion? (Consider splitting if relevance < 30%)
   - Does it involve completely different people, places, or events?

Decision Principles:
- **Prioritize topic independence**: Each episode should revolve around one core topic or event
- **When in doubt, split**: When uncertain, lean towards starting a new episode
- **Maintain reasonable length**: A single episode typically shouldn't exceed 10-15 messages

Please return your judgment in JSON format:
{{
    "should_end": true/false,
    "reason": "Specific reason for the judgment",
    "confidence": 0.0-1.0,
    "topic_summary": "If ending, summarize the core topic of the current episode"
}}

Note:
- If conversation history is empty, this is the first message, return false
- When a clear topic change is detected, split even if the conversation flows naturally
- Each episode should be a self-contained conversational unit that can be understood independently
"""

#: ``PromptTemplates.EPISODE_GENERATION_PROMPT`` (``get_episode_generation_prompt``)
EPISODE_PROMPT = """
You are an episodic memory generation expert. Please convert the following conversation into an episodic memory.

Conversation content:
{conversation}

Boundary detection reason:
{reason}

Please analyze the conversation to extract time information and generate a structured episodic memory. Return only a JSON object containing the following three fields:
{{
    "title": "A concise, descriptive title that accurately summarizes the theme (10-20 words)",
    "content": "A detailed description of the conversation in third-person narrative. It must include all important information: who participated in the conversation at what time, what was discussed, what decisions were made, what emotions were expressed, and what plans or outcomes were formed. Write it as a coherent story so that the reader can clearly understand what happened. Ensure that time information is precise to the hour, including year, month, day, and hour.",
    "timestamp": "YYYY-MM-DDTHH:MM:SS format timestamp representing when this episode occurred (analyze from message timestamps or content)"
}}

Time Analysis Instructions:
1. **Primary Source**: Look for explicit timestamps in the message metadata or content
2. **Secondary Source**: Analyze temporal references in the conversation content ("yesterday", "last week", "this morning", etc.)
3. **Fallback**: If no time information is available, use a reasonable estimate based on context
4. **Format**: Always return timestamp in ISO format: "2024-01-15T14:30:00"

Requirements:
1. The title should be specific and easy to search (including key topics/activities).
2. The content must include all important information from the conversation.
3. Convert the dialogue format into a narrative description.
4. Maintain chronological order and causal relationships.
5. Use third-person unless explicitly first-person.
6. Include specific details that aid keyword search.
7. Notice the time information, and write the time information in the content.
8. When relative times (e.g., last week, next month, etc.) are mentioned in the conversation, you need to convert them to absolute dates (year, month, day). Write the converted time in parentheses after the original time reference.
9. **IMPORTANT**: Analyze the actual time when the conversation happened from the message timestamps or content, not the current time.

Example:
If the conversation is about someone planning to go hiking and the messages have timestamps from March 14, 2024 at 3:00 PM:
{{
    "title": "Weekend Hiking Plan March 16, 2024: Sunrise Trip to Mount Rainier",
    "content": "On March 14, 2024 at 3:00 PM, the user expressed interest in going hiking on the upcoming weekend (March 16, 2024) and sought advice. They particularly wanted to see the sunrise at Mount Rainier, having heard the scenery is beautiful. When asked about gear, they received suggestions including hiking boots, warm clothing (as it's cold at the summit), a flashlight, water, and high-energy food. The user decided to leave at 4:00 AM on Saturday, March 16, 2024 to catch the sunrise and planned to invite friends for the adventure. They were very excited about the trip, hoping to connect with nature.",
    "timestamp": "2024-03-14T15:00:00"
}}

Return only the JSON object, do not add any other text:
"""

#: ``PromptTemplates.PREDICTION_PROMPT`` (``get_prediction_prompt``: statements as "- <statement>" lines)
PREDICTION_PROMPT = """
You are a knowledge-based episode prediction system. Your task is to reconstruct a complete conversation episode based on limited clues and your knowledge base.

IMPORTANT: You are predicting the ACTUAL CONTENT and KNOWLEDGE of what happened, not the writing style or format.

## Input Information

**Episode Title/Summary**: {title}

**Relevant Knowledge Statements** (your current world model):
{statements}

## Your Task

Based on the above clues, reconstruct what you believe happened in this episode. Focus on:
1. **Core Facts**: What specific information was discussed?
2. **Key Decisions**: What choices or conclusions were made?
3. **Knowledge Exchange**: What knowledge was shared or learned?
4. **Logical Flow**: How did the conversation progress?

## What to IGNORE
- Writing style or level of detail
- Specific formatting or structure
- Exact phrasing or word choices
- Whether timestamps are included in the text
- How formal or casual the language is

## Output Format

Generate a natural narrative that captures what you predict happened. Write it as if you're describing the episode to someone else. Focus on the SUBSTANCE, not the STYLE.

Your prediction:
"""

#: ``PredictionCorrectionEngine._cold_start_extraction``: the first episode's extraction, before any knowledge exists
COLD_START_PROMPT = """
You are a knowledge extraction specialist. Extract HIGH-VALUE, PERSISTENT knowledge statements from the following episode.

Episode Title: {title}
Episode Content: {content}
Episode Time: {date}

## CRITICAL: Focus on HIGH-VALUE Knowledge Only

Extract ONLY knowledge that passes these criteria:
- **Persistence Test**: Will this still be true in 6 months?
- **Specificity Test**: Does it contain concrete, searchable information?
- **Utility Test**: Can this help predict future user needs or preferences?
- **Independence Test**: Can this be understood without the conversation context?

## HIGH-VALUE Knowledge Categories (EXTRACT THESE):
1. **Identity & Background**: Names, professions, companies, education
2. **Persistent Preferences**: Favorite books/movies/tools, long-term likes/dislikes  
3. **Technical Details**: Technologies, versions, methodologies, architectures
4. **Relationships**: Family, colleagues, team members, mentors
5. **Goals & Plans**: Career objectives, learning goals, project plans
6. **Beliefs & Values**: Principles, philosophies, strong opinions
7. **Habits & Patterns**: Regular activities, workflows, schedules

## LOW-VALUE Knowledge (SKIP THESE):
- Temporary emotions or reactions
- Single conversation acknowledgments
- Vague statements without specifics
- Context-dependent information

## Guidelines:
1. Each statement should be self-contained and atomic
2. Include ALL specific details (names, versions, titles)
3. Use present tense for persistent facts
4. Focus on facts that help understand the user long-term
5. DO NOT include time/date information in the statement
6. Quality over quantity - fewer valuable statements are better

## Examples:
GOOD: "Caroline's favorite book is 'Becoming Nicole' by Amy Ellis Nutt"
GOOD: "The user works at ByteDance as a senior ML engineer"
BAD: "The user thanked the assistant"
BAD: "The user was happy about the response"

Return in JSON format:
{{
    "statements": [
        "First high-value knowledge statement...",
        "Second high-value knowledge statement...",
        "Third high-value knowledge statement..."
    ]
}}

Extract ONLY high-value, persistent knowledge. Return empty list if none found.
"""

#: ``PromptTemplates.EXTRACT_KNOWLEDGE_FROM_COMPARISON_PROMPT``: the gap between an episode and its prediction
COMPARISON_PROMPT = """
You are extracting valuable knowledge by comparing original conversation with predicted content.

## Original Conversation:
{messages}

## Predicted Summary:
{prediction}

## Your Task:
Extract ONLY the valuable knowledge that exists in the original but is missing or misrepresented in the prediction.

## CRITICAL: Focus on HIGH-VALUE Knowledge Only

Extract ONLY knowledge that passes these criteria:
- **Persistence Test**: Will this still be true in 6 months?
- **Specificity Test**: Does it contain concrete, searchable information?
- **Utility Test**: Can this help predict future user needs or preferences?
- **Independence Test**: Can this be understood without the conversation context?

## HIGH-VALUE Knowledge Categories (EXTRACT THESE):
1. **Identity & Background**: Names, professions, companies, education
2. **Persistent Preferences**: Favorite books/movies/tools, long-term likes/dislikes  
3. **Technical Details**: Technologies, versions, methodologies, architectures
4. **Relationships**: Family, colleagues, team members, mentors
5. **Goals & Plans**: Career objectives, learning goals, project plans
6. **Beliefs & Values**: Principles, philosophies, strong opinions
7. **Habits & Patterns**: Regular activities, workflows, schedules

## LOW-VALUE Knowledge (SKIP THESE):
- Temporary emotions or reactions
- Single conversation acknowledgments
- Vague statements without specifics
- Context-dependent information

## Guidelines:
1. Each statement should be self-contained and atomic
2. Include ALL specific details (names, versions, titles)
3. Use present tense for persistent facts
4. Focus on facts that help understand the user long-term
5. DO NOT include time/date information in the statement
6. Quality over quantity - fewer valuable statements are better

## Examples:
GOOD: "Caroline's favorite book is 'Becoming Nicole' by Amy Ellis Nutt"
GOOD: "The user works at ByteDance as a senior ML engineer"
BAD: "The user thanked the assistant"
BAD: "The user was happy about the response"

## Output Format:
{{
    "statements": [
        "First factual statement extracted from the gap",
        "Second factual statement extracted from the gap",
        "..."
    ]
}}

Important: 
- Each statement should be self-contained and understandable without context
- Use present tense for persistent facts
- Include specific names, titles, and details
- Focus on quality over quantity - only extract truly valuable knowledge
"""


NO_KNOWLEDGE_PREDICTION = ("Based on the title '{title}', a conversation likely occurred but no specific knowledge is "
                           "available to predict its content.")

THEME_PROMPT = ("You are building a stable high-level theme summary that captures recurring facts.\n"
                "Given the following factual statements, write a concise abstract theme that names the topic:\n"
                "{facts}\nReturn only the summary.")

GATE_PROMPT = ("You are an intelligent memory assistant.\n\n# THEMES\n{themes}\n\n# SEMANTICS\n{semantics}\n\n"
               "# EPISODES\n{episodes}\n\nQuestion: {question}\n\nAnswer:")

#: upstream's ANSWER_PROMPT (evaluation/locomo/xMemory_search_framework.py), dedented; ``{memories}`` is the recall
#: text, i.e. upstream's "Semantic Memories:" and "Episodic Memories:" blocks
ANSWER_PROMPT = """You are an intelligent memory assistant tasked with retrieving accurate information from conversation memories.

# CONTEXT:
You have access to memories from two speakers in a conversation. These memories contain
timestamped information that may be relevant to answering the question.

# INSTRUCTIONS:
1. Carefully analyze all provided memories from both speakers
2. Pay special attention to the timestamps to determine the answer
3. If the question asks about a specific event or fact, look for direct evidence in the memories
4. If the memories contain contradictory information, prioritize the most recent memory
5. If there is a question about time references (like "last year", "two months ago", etc.),
   calculate the actual date based on the memory timestamp. For example, if a memory from
   4 May 2022 mentions "went to India last year," then the trip occurred in 2021.
6. Always convert relative time references to specific dates, months, or years. For example,
   convert "last year" to "2022" or "two months ago" to "March 2023" based on the memory
   timestamp. Ignore the reference while answering the question. 
   Do not answer temporal questions in timestamp such as "2023-05-08", but answer naturally such as "7 May 2023" or "The week before 6 July 2023"!   
7. Focus only on the content of the memories from both speakers. Do not confuse character
   names mentioned in memories with the actual users who created those memories.
8. The answer should be less than 5-8 words.

{memories}

Question: {question}

Answer:"""

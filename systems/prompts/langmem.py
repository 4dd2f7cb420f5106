"""LangMem's prompt texts that this project supplies (the library's own prompts, e.g. the memory manager's
``_MEMORY_INSTRUCTIONS`` and trustcall's patch prompts, are used from the installed ``langmem==0.0.30`` and
``trustcall`` packages, not copied). ``PROFILE_INSTRUCTIONS`` is the user-profile guide's instruction verbatim
(https://langchain-ai.github.io/langmem/guides/manage_user_profile/, MIT); the profile schema's field descriptions
are ours: the guide's ``UserProfile`` (name, language, timezone) extended to the fields a personal assistant keeps
about a user (see ``systems/langmem.py``).
"""

PROMPTS_VERSION = "langmem-0.0.30-profile-v1"

#: the guide's ``instructions=`` for ``create_memory_manager(schemas=[UserProfile], enable_inserts=False)``
PROFILE_INSTRUCTIONS = "Extract user profile information"

#: the profile schema: (field, description); ``name``, ``language`` and ``timezone`` are the guide's (strings), the
#: rest ours (lists of short statements)
PROFILE_DOC = "Represents the full representation of a user."
PROFILE_STRING_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "The user's name."),
    ("language", "The language the user writes in."),
    ("timezone", "The user's timezone or location."),
)
PROFILE_LIST_FIELDS: tuple[tuple[str, str], ...] = (
    ("occupation", "The user's work, studies and professional circumstances."),
    ("relationships", "People in the user's life: family, household, friends, colleagues and pets."),
    ("health", "Facts about the user's wellbeing that bear on advice."),
    ("constraints", "Anything that limits what the user can do, eat, afford or take part in."),
    ("beliefs_and_practices", "The user's values, beliefs, commitments and regular practices."),
    ("plans", "Ongoing projects, upcoming events and goals of the user."),
    ("preferences", "The user's likes, dislikes and preferred ways of being helped."),
)

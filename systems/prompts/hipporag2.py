"""HippoRAG 2's prompts: the OpenIE prompts (NER and triple extraction, ``prompts/templates/ner.py`` and
``triple_extraction.py``) and the QA prompt (``rag_qa_musique.py``, as ``HippoRAG.qa`` lays it out), verbatim; and the
recognition-memory filter, verbatim from ``OSU-NLP-Group/HippoRAG`` at c617143 (MIT License,
"Copyright (c) 2025 OSU Natural Language Processing"; https://github.com/OSU-NLP-Group/HippoRAG): the DSPy program
``src/hipporag/prompts/dspy_prompts/filter_llama3.3-70B-Instruct.json`` (the one ``main.py`` passes as
``rerank_dspy_file_path``; ``prompts/filter_default_prompt.py``'s ``best_dspy_prompt``, used when none is given,
holds the same system prompt and demonstrations): its ``prog.system`` and its ten ``prog.demos`` (multi-hop film
and geography questions, the candidate facts and the facts kept, as upstream's JSON strings), laid out by
``rerank.py`` ``DSPyFilter.make_template``: the system prompt, then one user/assistant pair per demonstration, then
the query's user message.

Changes from upstream (JSON mode, each for a stated reason): the call uses json_object mode (the system's shared
JSON client: re-asks, repair and fault records), so
  - ``FILTER_INPUT`` (``one_input_template``) keeps upstream's two fields but ends with a JSON instruction instead
    of "Respond with the corresponding output fields, starting with the field `[[ ## fact_after_filter ## ]]` ...
    ending with the marker for `[[ ## completed ## ]]`": a json_object reply cannot hold DSPy's markers;
  - each demonstration's assistant turn is its ``fact_after_filter`` value alone (upstream's JSON string, byte for
    byte) instead of ``one_output_template``'s "[[ ## fact_after_filter ## ]]\n...\n\n[[ ## completed ## ]]".
``FILTER_SYSTEM`` and the demonstrations' texts are unchanged (the system prompt's marker layout included).
"""

PROMPTS_VERSION = "hipporag2-filter-upstream-c617143-v1"
#: ``prog.system`` of the DSPy program, verbatim
FILTER_SYSTEM = (
    "Your input fields are:\n"
    "1. `question` (str): Query for retrieval\n"
    "2. `fact_before_filter` (str): Candidate facts to be filtered\n"
    "\n"
    "Your output fields are:\n"
    "1. `fact_after_filter` (Fact): Filtered facts in JSON format\n"
    "\n"
    "All interactions will be structured in the following way, with the appropriate values filled in.\n"
    "\n"
    "[[ ## question ## ]]\n"
    "{question}\n"
    "\n"
    "[[ ## fact_before_filter ## ]]\n"
    "{fact_before_filter}\n"
    "\n"
    "[[ ## fact_after_filter ## ]]\n"
    "{fact_after_filter}        # note: the value you produce must be pareseable according to the following JSON schema: {\"type\": \"object\", \"properties\": {\"fact\": {\"type\": \"array\", \"description\": \"A list of facts, each fact is a list of 3 strings: [subject, predicate, object]\", \"items\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"title\": \"Fact\"}}, \"required\": [\"fact\"], \"title\": \"Fact\"}\n"
    "\n"
    "[[ ## completed ## ]]\n"
    "\n"
    "In adhering to this structure, your objective is: \n"
    "        You are a critical component of a high-stakes question-answering system used by top researchers and decision-makers worldwide. Your task is to filter facts based on their relevance to a given query, ensuring that the most crucial information is presented to these stakeholders. The query requires careful analysis and possibly multi-hop reasoning to connect different pieces of information. You must select up to 4 relevant facts from the provided candidate list that have a strong connection to the query, aiding in reasoning and providing an accurate answer. The output should be in JSON format, e.g., {\"fact\": [[\"s1\", \"p1\", \"o1\"], [\"s2\", \"p2\", \"o2\"]]}, and if no facts are relevant, return an empty list, {\"fact\": []}. The accuracy of your response is paramount, as it will directly impact the decisions made by these high-level stakeholders. You must only use facts from the candidate list and not generate new facts. The future of critical decision-making relies on your ability to accurately filter and present relevant information."
)

#: ``DSPyFilter.one_input_template``, its closing sentence replaced by a JSON instruction (see above)
FILTER_INPUT = (
    "[[ ## question ## ]]\n{question}\n\n"
    "[[ ## fact_before_filter ## ]]\n{fact_before_filter}\n\n"
    "Respond with the output field `fact_after_filter`: a JSON object of the form "
    '{{"fact": [[subject, predicate, object], ...]}} holding only facts from the candidate list.'
)

#: ``prog.demos``: (question, fact_before_filter, fact_after_filter), upstream's strings verbatim
FILTER_DEMOS: tuple[tuple[str, str, str], ...] = (
    ("Are Imperial River (Florida) and Amaradia (Dolj) both located in the same country?",
     "{\"fact\": [[\"imperial river\", \"is located in\", \"florida\"], [\"imperial river\", \"is a river in\", \"united states\"], [\"imperial river\", \"may refer to\", \"south america\"], [\"amaradia\", \"flows through\", \"ro ia de amaradia\"], [\"imperial river\", \"may refer to\", \"united states\"]]}",
     "{\"fact\":[[\"imperial river\",\"is located in\",\"florida\"],[\"imperial river\",\"is a river in\",\"united states\"],[\"amaradia\",\"flows through\",\"ro ia de amaradia\"]]}"),
    ("When is the director of film The Ancestor 's birthday?",
     "{\"fact\": [[\"jean jacques annaud\", \"born on\", \"1 october 1943\"], [\"tsui hark\", \"born on\", \"15 february 1950\"], [\"pablo trapero\", \"born on\", \"4 october 1971\"], [\"the ancestor\", \"directed by\", \"guido brignone\"], [\"benh zeitlin\", \"born on\", \"october 14  1982\"]]}",
     "{\"fact\":[[\"the ancestor\",\"directed by\",\"guido brignone\"]]}"),
    ("In what geographic region is the country where Teafuone is located?",
     "{\"fact\": [[\"teafuaniua\", \"is on the\", \"east\"], [\"motuloa\", \"lies between\", \"teafuaniua\"], [\"motuloa\", \"lies between\", \"teafuanonu\"], [\"teafuone\", \"is\", \"islet\"], [\"teafuone\", \"located in\", \"nukufetau\"]]}",
     "{\"fact\":[[\"teafuone\",\"is\",\"islet\"],[\"teafuone\",\"located in\",\"nukufetau\"]]}"),
    ("When did the director of film S.O.B. (Film) die?",
     "{\"fact\": [[\"allan dwan\", \"died on\", \"28 december 1981\"], [\"s o b\", \"written and directed by\", \"blake edwards\"], [\"robert aldrich\", \"died on\", \"december 5  1983\"], [\"robert siodmak\", \"died on\", \"10 march 1973\"], [\"bernardo bertolucci\", \"died on\", \"26 november 2018\"]]}",
     "{\"fact\":[[\"s o b\",\"written and directed by\",\"blake edwards\"]]}"),
    ("Do both films: Gloria (1980 Film) and A New Life (Film) have the directors from the same country?",
     "{\"fact\": [[\"sebasti n lelio watt\", \"received acclaim for directing\", \"gloria\"], [\"gloria\", \"is\", \"1980 american thriller crime drama film\"], [\"a brand new life\", \"is directed by\", \"ounie lecomte\"], [\"gloria\", \"written and directed by\", \"john cassavetes\"], [\"a new life\", \"directed by\", \"alan alda\"]]}",
     "{\"fact\":[[\"gloria\",\"is\",\"1980 american thriller crime drama film\"],[\"gloria\",\"written and directed by\",\"john cassavetes\"],[\"a new life\",\"directed by\",\"alan alda\"]]}"),
    ("What is the date of death of the director of film The Old Guard (1960 Film)?",
     "{\"fact\": [[\"the old guard\", \"is\", \"1960 french comedy film\"], [\"gilles grangier\", \"directed\", \"the old guard\"], [\"the old guard\", \"directed by\", \"gilles grangier\"], [\"the old fritz\", \"directed by\", \"gerhard lamprecht\"], [\"oswald albert mitchell\", \"directed\", \"old mother riley series of films\"]]}",
     "{\"fact\":[[\"the old guard\",\"is\",\"1960 french comedy film\"],[\"gilles grangier\",\"directed\",\"the old guard\"],[\"the old guard\",\"directed by\",\"gilles grangier\"]]}"),
    ("When is the composer of film Aulad (1968 Film) 's birthday?",
     "{\"fact\": [[\"aulad\", \"has music composed by\", \"chitragupta shrivastava\"], [\"aadmi sadak ka\", \"has music by\", \"ravi\"], [\"ravi shankar sharma\", \"composed music for\", \"hindi films\"], [\"gulzar\", \"was born on\", \"18 august 1934\"], [\"aulad\", \"is a\", \"1968 hindi language drama film\"]]}",
     "{\"fact\":[[\"aulad\",\"has music composed by\",\"chitragupta shrivastava\"],[\"aulad\",\"is a\",\"1968 hindi language drama film\"]]}"),
    ("How many households were in the city where Angelical Tears located?",
     "{\"fact\": [[\"dow city\", \"had\", \"219 households\"], [\"tucson\", \"had\", \"229 762 households\"], [\"atlantic city\", \"has\", \"15 504 households\"], [\"angelical tears\", \"located in\", \"oklahoma city\"], [\"atlantic city\", \"had\", \"15 848 households\"]]}",
     "{\"fact\": [[\"angelical tears\", \"located in\", \"oklahoma city\"]]}"),
    ("Did the movies In The Pope'S Eye and Virgin Mountain, originate from the same country?",
     "{\"fact\": [[\"virgin mountain\", \"released in\", \"icelandic cinemas\"], [\"virgin mountain\", \"directed by\", \"dagur k ri\"], [\"virgin mountain\", \"icelandic title is\", \"f si\"], [\"virgin mountain\", \"won\", \"2015 nordic council film prize\"], [\"virgin mountain\", \"is a\", \"2015 icelandic drama film\"]]}",
     "{\"fact\": [[\"virgin mountain\", \"released in\", \"icelandic cinemas\"], [\"virgin mountain\", \"directed by\", \"dagur k ri\"], [\"virgin mountain\", \"icelandic title is\", \"f si\"], [\"virgin mountain\", \"won\", \"2015 nordic council film prize\"], [\"virgin mountain\", \"is a\", \"2015 icelandic drama film\"]]}"),
    ("Which film has the director who died earlier, The Virtuous Model or Bulldog Drummond'S Peril?",
     "{\"fact\": [[\"the virtuous model\", \"is\", \"1919 american silent drama film\"], [\"bulldog drummond s peril\", \"directed by\", \"james p  hogan\"], [\"the virtuous model\", \"directed by\", \"albert capellani\"], [\"bulldog drummond s revenge\", \"directed by\", \"louis king\"], [\"bulldog drummond s peril\", \"is\", \"american film\"]]}",
     "{\"fact\": [[\"the virtuous model\", \"is\", \"1919 american silent drama film\"], [\"bulldog drummond s peril\", \"directed by\", \"james p  hogan\"], [\"the virtuous model\", \"directed by\", \"albert capellani\"], [\"bulldog drummond s peril\", \"is\", \"american film\"]]}"),
)


# -- NER (prompts/templates/ner.py, verbatim) ---------------------------------------------------------------------

NER_SYSTEM = """Your task is to extract named entities from the given paragraph. 
Respond with a JSON list of entities.
"""

ONE_SHOT_PASSAGE = """Radio City
Radio City is India's first private FM radio station and was started on 3 July 2001.
It plays Hindi, English and regional songs.
Radio City recently forayed into New Media in May 2008 with the launch of a music portal - PlanetRadiocity.com that offers music related news, videos, songs, and other music-related features."""

ONE_SHOT_NER_OUTPUT = """{"named_entities":
    ["Radio City", "India", "3 July 2001", "Hindi", "English", "May 2008", "PlanetRadiocity.com"]
}
"""

# -- OpenIE (prompts/templates/triple_extraction.py, verbatim) ----------------------------------------------------

TRIPLE_SYSTEM = """Your task is to construct an RDF (Resource Description Framework) graph from the given passages and named entity lists. 
Respond with a JSON list of triples, with each triple representing a relationship in the RDF graph. 

Pay attention to the following requirements:
- Each triple should contain at least one, but preferably two, of the named entities in the list for each passage.
- Clearly resolve pronouns to their specific names to maintain clarity.

"""

TRIPLE_FRAME = """Convert the paragraph into a JSON dict, it has a named entity list and a triple list.
Paragraph:
```
{passage}
```

{named_entity_json}
"""

ONE_SHOT_TRIPLE_OUTPUT = """{"triples": [
            ["Radio City", "located in", "India"],
            ["Radio City", "is", "private FM radio station"],
            ["Radio City", "started on", "3 July 2001"],
            ["Radio City", "plays songs in", "Hindi"],
            ["Radio City", "plays songs in", "English"],
            ["Radio City", "forayed into", "New Media"],
            ["Radio City", "launched", "PlanetRadiocity.com"],
            ["PlanetRadiocity.com", "launched in", "May 2008"],
            ["PlanetRadiocity.com", "is", "music portal"],
            ["PlanetRadiocity.com", "offers", "news"],
            ["PlanetRadiocity.com", "offers", "videos"],
            ["PlanetRadiocity.com", "offers", "songs"]
    ]
}
"""

# -- QA (prompts/templates/rag_qa_musique.py verbatim, laid out as HippoRAG.qa) ------------------------------------

QA_SYSTEM = (
    'As an advanced reading comprehension assistant, your task is to analyze text passages and corresponding questions meticulously. '
    'Your response start after "Thought: ", where you will methodically break down the reasoning process, illustrating how you arrive at conclusions. '
    'Conclude with "Answer: " to present a concise, definitive response, devoid of additional elaborations.'
)

#: the label ``HippoRAG.qa`` puts before every retrieved passage, whatever the dataset
QA_DOC_LABEL = "Wikipedia Title: "

_ONE_SHOT_QA_DOCS = (
    """Wikipedia Title: The Last Horse\nThe Last Horse (Spanish:El último caballo) is a 1950 Spanish comedy film directed by Edgar Neville starring Fernando Fernán Gómez.\n"""
    """Wikipedia Title: Southampton\nThe University of Southampton, which was founded in 1862 and received its Royal Charter as a university in 1952, has over 22,000 students. The university is ranked in the top 100 research universities in the world in the Academic Ranking of World Universities 2010. In 2010, the THES - QS World University Rankings positioned the University of Southampton in the top 80 universities in the world. The university considers itself one of the top 5 research universities in the UK. The university has a global reputation for research into engineering sciences, oceanography, chemistry, cancer sciences, sound and vibration research, computer science and electronics, optoelectronics and textile conservation at the Textile Conservation Centre (which is due to close in October 2009.) It is also home to the National Oceanography Centre, Southampton (NOCS), the focus of Natural Environment Research Council-funded marine research.\n"""
    """Wikipedia Title: Stanton Township, Champaign County, Illinois\nStanton Township is a township in Champaign County, Illinois, USA. As of the 2010 census, its population was 505 and it contained 202 housing units.\n"""
    """Wikipedia Title: Neville A. Stanton\nNeville A. Stanton is a British Professor of Human Factors and Ergonomics at the University of Southampton. Prof Stanton is a Chartered Engineer (C.Eng), Chartered Psychologist (C.Psychol) and Chartered Ergonomist (C.ErgHF). He has written and edited over a forty books and over three hundered peer-reviewed journal papers on applications of the subject. Stanton is a Fellow of the British Psychological Society, a Fellow of The Institute of Ergonomics and Human Factors and a member of the Institution of Engineering and Technology. He has been published in academic journals including "Nature". He has also helped organisations design new human-machine interfaces, such as the Adaptive Cruise Control system for Jaguar Cars.\n"""
    """Wikipedia Title: Finding Nemo\nFinding Nemo Theatrical release poster Directed by Andrew Stanton Produced by Graham Walters Screenplay by Andrew Stanton Bob Peterson David Reynolds Story by Andrew Stanton Starring Albert Brooks Ellen DeGeneres Alexander Gould Willem Dafoe Music by Thomas Newman Cinematography Sharon Calahan Jeremy Lasky Edited by David Ian Salter Production company Walt Disney Pictures Pixar Animation Studios Distributed by Buena Vista Pictures Distribution Release date May 30, 2003 (2003 - 05 - 30) Running time 100 minutes Country United States Language English Budget $$94 million Box office $$940.3 million"""
)

ONE_SHOT_QA_INPUT = (
    f"{_ONE_SHOT_QA_DOCS}"
    "\n\nQuestion: "
    "When was Neville A. Stanton's employer founded?"
    '\nThought: '
)

ONE_SHOT_QA_OUTPUT = (
    "The employer of Neville A. Stanton is University of Southampton. The University of Southampton was founded in 1862. "
    "\nAnswer: 1862."
)

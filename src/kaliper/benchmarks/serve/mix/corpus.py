"""The built-in words synthetic prompts are made of: plain ASCII English, no whitespace inside a word.

Built in (not read from a file or a hub) so a synthetic request mix is the same on every machine. The words
are varied (nouns, verbs, adjectives, numbers, short function words) so that a tokenizer splits them into a
realistic spread of tokens; ASCII only, so that cutting a decoded text never splits a character.
"""

from __future__ import annotations

_TEXT = """
the of and to in is that for it as was with be by on not he this are or his from at which but have an they
you were her she there been one all we their has would when if so no will more can out up about them said
time what some could into only other then new these two may first any like now my such make over our even
most after also made many before must through back years where much your way well down should because each
just those people how too little state good very world still own see men work long here get both between
life being under never day same another know while last might great old year off come since against go came
right used take three four five six seven eight nine ten hundred thousand million city river mountain valley
forest ocean island desert garden kitchen window door table chair library museum market station bridge road
harbor village castle tower school hospital theater factory farm orchard meadow glacier volcano canyon lake
stream storm thunder lightning rain snow wind cloud sunrise sunset morning evening night winter summer
autumn spring season weather climate temperature pressure energy power engine motor wheel gear lever pulley
circuit signal network server client request answer question problem solution method theory experiment
measure sample result error value number letter word sentence paragraph chapter story novel poem song
music rhythm melody harmony painting sculpture color shape pattern texture surface edge corner center
circle square triangle line point angle distance speed weight height width depth volume density mass force
gravity light shadow mirror glass metal wood stone paper cloth leather silver gold copper iron steel
carbon oxygen hydrogen water fire earth air salt sugar bread cheese apple orange lemon grape cherry peach
potato carrot onion pepper garlic rice wheat corn bean coffee tea milk honey butter soup dinner lunch
breakfast recipe flavor doctor teacher farmer sailor pilot driver writer painter singer dancer player
student worker builder merchant soldier judge author reader visitor neighbor friend family mother father
sister brother child parent cousin uncle aunt horse tiger eagle falcon whale dolphin salmon turtle rabbit
squirrel fox wolf bear deer owl sparrow bee ant spider butterfly dragon robot machine computer keyboard
screen printer camera telescope microscope compass map clock calendar journal ledger budget invoice
contract policy report meeting project schedule deadline progress quality safety health travel journey
voyage adventure mystery puzzle riddle secret promise memory dream idea plan goal reason purpose choice
chance risk reward price cost profit trade bank coin ticket letterbox parcel package basket bottle jar
box bag pocket button thread needle hammer nail screw shovel ladder rope chain lock key candle lamp
blanket pillow carpet curtain ceiling floor wall roof chimney fence gate path trail track lane avenue
quietly quickly slowly carefully gently loudly brightly rarely often always sometimes perhaps together
alone nearby inside outside above below beyond across toward around among within without during until
ancient modern simple complex gentle brave clever curious eager famous honest humble jolly kind lively
patient proud quiet rapid silent steady sturdy swift tidy vivid warm wild wise young bright dark heavy
light empty full narrow wide shallow deep rough smooth sharp soft hard cold hot dry wet fresh sweet bitter
sour salty green blue red yellow purple brown black white gray pink violet amber crimson scarlet azure
build carry climb collect cook count cover cross dance deliver describe design discover draw drive explain
explore follow gather grow guide help hold imagine invent jump kick laugh learn listen lift mend move
notice open paint plant play polish pour pull push reach read remember repair rest return ride ring run
sail save search share shine sing sit sketch sleep smile solve sort speak spin stand start stay stir study
swim teach tell think throw travel turn visit wait walk wander wash watch weave whisper wonder write
"""
# Distinct words in their first order (a word written twice above counts once).
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_TEXT.split()))

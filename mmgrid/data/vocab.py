"""Word lists of the synthetic world: per domain, per latent category, nouns then modifiers.

Each category's words appear in its items' titles, descriptions and reviews, so text carries
signal about the latent category (synthetic world).
"""

from __future__ import annotations

# domain -> category -> "noun noun noun noun | modifier modifier modifier modifier"
CATEGORY_WORDS: dict[str, dict[str, str]] = {
    "Phones": {
        "cases": "case cover shell bumper | rugged slim clear shockproof",
        "chargers": "charger adapter plug brick | fast wireless dual compact",
        "cables": "cable cord lead connector | braided long durable coiled",
        "screens": "protector film glass shield | tempered matte privacy curved",
        "audio": "earbuds headset speaker earphones | bluetooth noise-cancelling bass stereo",
        "mounts": "mount holder stand grip | magnetic dashboard adjustable foldable",
    },
    "Books": {
        "mystery": "detective murder secret clue | dark chilling twisted noir",
        "romance": "love heart wedding kiss | sweet passionate tender summer",
        "scifi": "galaxy starship robot planet | cosmic futuristic alien quantum",
        "history": "empire war revolution dynasty | ancient medieval forgotten imperial",
        "cooking": "recipes kitchen baking feast | homemade vegan easy seasonal",
        "children": "bunny dragon bedtime adventure | little magical curious silly",
    },
    "Games": {
        "rpg": "quest saga legend kingdom | epic fantasy mythic heroic",
        "shooter": "blaster squad warfare strike | tactical rapid explosive covert",
        "racing": "racer circuit drift rally | turbo nitro speedy offroad",
        "puzzle": "puzzle riddle maze blocks | clever tricky colorful logical",
        "sports": "league striker court pitch | pro arcade champion arena",
        "gear": "controller gamepad joystick keyboard | ergonomic rgb precise programmable",
    },
    "Health": {
        "vitamins": "vitamin capsules tablets gummies | daily organic chewable immune",
        "cleaning": "detergent wipes spray cleaner | citrus antibacterial unscented concentrated",
        "oral": "toothbrush floss toothpaste mouthwash | whitening sonic mint sensitive",
        "paper": "towels tissues napkins rolls | soft absorbent quilted plush",
        "firstaid": "bandages thermometer gauze splint | sterile digital medical elastic",
        "sleep": "pillow melatonin earplugs eyemask | calming lavender contoured restful",
    },
    "Sports": {
        "camping": "tent lantern hammock stove | waterproof portable lightweight insulated",
        "fitness": "dumbbell kettlebell mat band | adjustable heavy grippy resistance",
        "cycling": "bike helmet pedal saddle | aero carbon padded reflective",
        "fishing": "rod reel lure tackle | telescopic spinning saltwater baited",
        "running": "shoes shorts armband vest | breathable cushioned sweatproof stretchy",
        "water": "kayak paddle snorkel goggles | inflatable anti-fog buoyant marine",
    },
    # the amazon_table1 world's sixth domain (MMGRid Table 1: Movies and TV)
    "Movies": {
        "action": "heist mission chase showdown | explosive relentless gritty undercover",
        "comedy": "roommates road-trip prank sitcom | hilarious awkward zany feel-good",
        "drama": "family courtroom memoir journey | moving intimate acclaimed haunting",
        "horror": "haunting curse cabin creature | terrifying bloody cursed eerie",
        "documentary": "nature ocean wildlife biography | untold true investigative remastered",
        "animation": "cartoon fairy toons musical | animated family-friendly enchanted whimsical",
    },
}

MAIN_CATEGORY = {
    "Phones": "Cell Phones & Accessories",
    "Books": "Books",
    "Games": "Video Games",
    "Health": "Health & Household",
    "Sports": "Sports & Outdoors",
    "Movies": "Movies & TV",
}

SYLLABLES = ("ka", "lo", "vi", "ren", "tor", "mi", "zen", "sa", "qu", "bel", "dro", "fin", "ga", "nex", "or", "pa")

POSITIVE = ("Great", "Love it", "Works well", "Excellent", "Very good", "Five stars", "Happy with it")
NEUTRAL = ("Okay", "Decent", "Not bad", "Average", "It is fine")
NEGATIVE = ("Disappointed", "Broke quickly", "Not worth it", "Poor quality", "Returned it")
CLOSINGS = (
    "Would buy again.", "Arrived on time.", "Good value for the price.", "My family likes it.",
    "Does what it says.", "Packaging was fine.", "Recommended to friends.", "Will see how it lasts.",
)  # fmt: skip
QUALITY = ("solid", "nice", "handy", "sturdy", "cheap", "pretty", "useful", "flimsy")


def split_words(spec: str) -> tuple[list[str], list[str]]:
    """``"n1 n2 | m1 m2"`` → (nouns, modifiers)."""
    nouns, mods = spec.split("|")
    return nouns.split(), mods.split()

"""A tiny IWSLT2017 de-en release folder (train.tags with metadata lines, the dev2010 and tst2010-2015 XML
files), as the release archive unpacks."""

from helpers.files import write


def iwslt_release(folder, skip=()):
    meta = ["<url>http://www.ted.com/talks/x</url>", "<keywords>talks</keywords>", "<talkid>1</talkid>",
            "<title>T</title>", "<description>TED: d</description>"]
    write(folder / "train.tags.de-en.de", meta + ["Hallo Welt .", "Danke ."] + ["<reviewer></reviewer>"])
    write(folder / "train.tags.de-en.en", meta + ["Hello world .", "Thanks ."] + ["<reviewer></reviewer>"])
    for name in ["dev2010"] + [f"tst{y}" for y in range(2010, 2016)]:
        for lang, text in (("de", f"Satz {name} &amp; mehr ."), ("en", f"Sentence {name} &amp; more .")):
            path = folder / f"IWSLT17.TED.{name}.de-en.{lang}.xml"
            if path.name in skip:
                continue
            write(path, ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", '<srcset setid="x">',
                         '<doc docid="535" genre="lectures">', "<talkid>535</talkid>", "<title>T</title>",
                         f'<seg id="1"> {text} </seg>', "</doc>", "</srcset>", "</mteval>"])
    return folder

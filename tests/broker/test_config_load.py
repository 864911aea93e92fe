"""journal_engine.config.load: which system's file it is, hostile XML refused, wrong values named with
their element, value and line, and every element the broker does not implement logged at WARNING."""
from __future__ import annotations

import logging

import pytest

import journal_engine
from journal_engine import AddressSettings, AddressSettingsRepository, Broker, BrokerConfig, ConfigError
from journal_engine.config import detect_system, load

ARTEMIS = """<?xml version='1.0'?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
   <core xmlns="urn:activemq:core">
      <name>0.0.0.0</name>
      <journal-directory>data/journal</journal-directory>
      <max-redelivery-records>1</max-redelivery-records>
      <address-settings>
         <address-setting match="#">
            <dead-letter-address>DLA</dead-letter-address>
            <max-size-bytes>-1</max-size-bytes>
            <max-delivery-attempts>3</max-delivery-attempts>
         </address-setting>
      </address-settings>
   </core>
</configuration>
"""

HORNETQ = """<configuration xmlns="urn:hornetq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
   <persist-delivery-count-before-delivery>true</persist-delivery-count-before-delivery>
   <address-settings>
      <address-setting match="jms.queue.exampleQueue">
         <dead-letter-address>jms.queue.deadLetterQueue</dead-letter-address>
         <max-delivery-attempts>3</max-delivery-attempts>
      </address-setting>
   </address-settings>
</configuration>
"""


def test_load_reads_an_artemis_broker_xml_from_text_bytes_and_path(tmp_path):
    path = tmp_path / "broker.xml"
    path.write_text(ARTEMIS)
    for source in (ARTEMIS, ARTEMIS.encode(), path, str(path)):
        config = load(source)
        assert isinstance(config, BrokerConfig)
        assert config.system == "artemis" and config.dialect is None
        assert config.max_redelivery_records == 1
        assert config.persist_delivery_count_before_delivery is None
        settings = config.address_settings.get("orders")
        assert (settings.dead_letter_address, settings.max_delivery_attempts) == ("DLA", 3)
    assert load(config) is config
    assert journal_engine.config.load is load


def test_a_hornetq_configuration_is_recognised_and_sets_the_dialect():
    config = load(HORNETQ)
    assert (config.system, config.dialect) == ("hornetq", "hornetq")
    assert config.persist_delivery_count_before_delivery is True
    assert config.address_settings.get("jms.queue.exampleQueue").dead_letter_address == "jms.queue.deadLetterQueue"
    broker = Broker(config=HORNETQ)
    assert broker.dialect == "hornetq"
    assert Broker(config=ARTEMIS, dialect="hornetq").dialect == "hornetq"      # the file says nothing
    with pytest.raises(ConfigError, match="dialect"):
        Broker(config=HORNETQ, dialect="bogus")


@pytest.mark.parametrize("xml, system", [
    ("<configuration/>", "artemis"),
    ("<core xmlns='urn:activemq:core'/>", "artemis"),
    ("<configuration xmlns='urn:hornetq'/>", "hornetq"),
    ("<beans xmlns='http://www.springframework.org/schema/beans'/>", "classic"),
    ("<broker xmlns='http://activemq.apache.org/schema/core'/>", "classic"),
])
def test_detect_system_by_the_root_element(xml, system):
    from journal_engine.broker.config.safe_xml import parse_xml
    assert detect_system(parse_xml(xml, "t")) == system


def test_a_file_of_no_known_system_is_refused_with_its_line():
    with pytest.raises(ConfigError) as caught:
        load("\n\n<html><body/></html>")
    assert "<html>" in str(caught.value) and caught.value.line == 3


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<configuration><core><address-settings><address-setting match="#">
<dead-letter-address>&lol3;</dead-letter-address></address-setting></address-settings></core></configuration>"""

HOSTILE = {
    "doctype": '<!DOCTYPE configuration><configuration/>',
    "internal entity": '<!DOCTYPE c [<!ENTITY a "DLA">]><configuration><core><address-settings>'
                       '<address-setting match="#"><dead-letter-address>&a;</dead-letter-address>'
                       '</address-setting></address-settings></core></configuration>',
    "external entity": '<!DOCTYPE c [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
                       '<configuration><name>&xxe;</name></configuration>',
    "external dtd": '<!DOCTYPE configuration SYSTEM "http://example.com/evil.dtd"><configuration/>',
    "parameter entity": '<!DOCTYPE c [<!ENTITY % p SYSTEM "http://example.com/p.dtd"> %p;]><configuration/>',
    "billion laughs": BILLION_LAUGHS,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_xml_is_refused_everywhere_it_is_read(name, tmp_path):
    xml = HOSTILE[name]
    path = tmp_path / "broker.xml"
    path.write_text(xml)
    for read in (load, lambda x: Broker(config=x),
                 AddressSettingsRepository.from_broker_xml):
        for source in (xml, path):
            with pytest.raises(ConfigError, match="DOCTYPE") as caught:
                read(source)
            assert caught.value.line is not None
    with pytest.raises(ConfigError):
        AddressSettings.from_xml(xml)


def test_hostile_xml_is_refused_before_any_entity_is_expanded():
    with pytest.raises(ConfigError) as caught:
        load(BILLION_LAUGHS)
    assert "lol" in str(caught.value) and caught.value.line == 2


WRONG = """<configuration>
  <core>
    <address-settings>
      <address-setting match="orders.#">
        <redelivery-delay>{delay}</redelivery-delay>
        <redelivery-collision-avoidance-factor>{factor}</redelivery-collision-avoidance-factor>
      </address-setting>
    </address-settings>
    <max-redelivery-records>{records}</max-redelivery-records>
    <wildcard-addresses>
      <delimiter>{delimiter}</delimiter>
    </wildcard-addresses>
  </core>
</configuration>"""
GOOD = {"delay": "5", "factor": "0.5", "records": "1", "delimiter": "."}


@pytest.mark.parametrize("field, value, element, line", [
    ("delay", "soon", "redelivery-delay", 5),
    ("delay", "-5", "redelivery-delay", 5),
    ("delay", "${delay}", "redelivery-delay", 5),
    ("factor", "1.5", "redelivery-collision-avoidance-factor", 6),
    ("factor", "x", "redelivery-collision-avoidance-factor", 6),
    ("records", "-2", "max-redelivery-records", 9),
    ("delimiter", "::", "delimiter", 11),
])
def test_a_wrong_value_is_named_with_element_value_and_line(field, value, element, line):
    with pytest.raises(ConfigError) as caught:
        load(WRONG.format(**{**GOOD, field: value}))
    message = str(caught.value)
    assert element in message and value in message and f"line {line}" in message
    assert caught.value.line == line


def test_the_good_values_of_that_file_load():
    config = load(WRONG.format(**GOOD))
    assert config.address_settings.get("orders.eu").redelivery_collision_avoidance_factor == 0.5


@pytest.mark.parametrize("xml, fragment, line", [
    ('<configuration>\n<address-settings>\n<address-setting>\n</address-setting></address-settings></configuration>',
     "match attribute", 3),
    ('<configuration>\n<address-settings>\n<address-setting match="a.#.b"/></address-settings></configuration>',
     "a.#.b", 3),
    ('<configuration><address-settings>\n\n<address-setting match="#">\n<redelivery-dealy>5</redelivery-dealy>'
     '</address-setting></address-settings></configuration>', "redelivery-dealy", 4),
    ('<configuration><address-settings>\n<queue-setting match="#"/></address-settings></configuration>',
     "queue-setting", 2),
    ('<configuration>\n<core>\n<address-settings>\n</core></configuration>', "well-formed", 4),
])
def test_structural_mistakes_are_named_with_their_line(xml, fragment, line):
    with pytest.raises(ConfigError) as caught:
        load(xml)
    assert fragment in str(caught.value) and caught.value.line == line


def test_every_element_the_broker_does_not_implement_is_a_warning_with_its_line(caplog):
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        config = load(ARTEMIS)
    assert config.unimplemented == [("name", 4), ("journal-directory", 5),
                                    ("address-setting[match='#']/max-size-bytes", 10)]
    messages = [r.getMessage() for r in caplog.records if r.name == "journal_engine.config"]
    assert len(messages) == 3
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "journal_engine.config")
    assert "line 5" in messages[1] and "<journal-directory>" in messages[1]
    assert "line 10" in messages[2] and "max-size-bytes" in messages[2]


def test_a_file_with_only_implemented_elements_logs_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        load(HORNETQ)
    assert not [r for r in caplog.records if r.name.startswith("journal_engine")]


def test_load_refuses_what_is_not_a_configuration():
    with pytest.raises(TypeError):
        load(42)
    with pytest.raises(ConfigError, match="cannot be read"):
        load("/nonexistent/broker.xml")


def test_wildcard_routing_is_not_implemented_so_asking_for_it_is_a_warning(caplog):
    xml = """<configuration><core>
  <wildcard-addresses>
    <routing-enabled>true</routing-enabled>
    <delimiter>/</delimiter>
  </wildcard-addresses>
</core></configuration>"""
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        config = load(xml)
    assert config.unimplemented == [("wildcard-addresses/routing-enabled", 3)]
    assert config.address_settings.delimiter == "/"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        load(xml.replace("true", "false"))
    assert not caplog.records

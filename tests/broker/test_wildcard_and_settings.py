"""Address wildcards, the hierarchical repository (Artemis RepositoryTest facts), AddressSettings merge
and defaults, and reading Artemis broker.xml address settings."""
from __future__ import annotations

import dataclasses

import threading

import pytest

import journal_engine
from journal_engine import AddressSettings, AddressSettingsRepository, ConfigError, HierarchicalRepository
from journal_engine.broker.config.artemis import read_artemis_broker_xml
from journal_engine.wildcard import is_wild, matches, verify_match

pytestmark = pytest.mark.same_on_both   # wildcards and settings in Python, no core object

# ------------------------------------------------------------------------------------------- wildcards


@pytest.mark.parametrize("pattern, address, expected", [
    ("a.b.#", "a.b", True),          # <delimiter># collapses: zero words
    ("a.b.#", "a.b.c", True),
    ("a.b.#", "a.b.c.d", True),
    ("a.b.#", "a.bc", False),
    ("a.b.#", "a", False),
    ("a.b.#", "a.b.", False),
    ("news.*", "news.europe", True),
    ("news.*", "news", False),
    ("news.*", "news.a.b", False),
    ("news.*", "news.", False),
    ("#", "", True),
    ("#", "anything.at.all", True),
    ("*", "a", True),
    ("*", "", False),
    ("*", "a.b", False),
    ("*.b", "a.b", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.b", "a.b", True),
    ("a.b", "a.bc", False),
    ("a.b", "aXb", False),            # the delimiter is literal, not a regex dot
    ("a+b", "a+b", True),             # other characters are literal too
    ("a+b", "aab", False),
    ("orders.$x", "orders.$x", True),
    ("a.#.d", "a.d", True),           # a # in the middle: routing-side wildcards allow it
    ("a.#.d", "a.b.c.d", True),
    ("a.#.d", "a.b.c", False),
])
def test_matches_follows_the_artemis_regex_conversion(pattern, address, expected):
    assert matches(pattern, address) is expected


def test_matches_with_configured_characters_mqtt_style():
    args = {"delimiter": "/", "any_words": "#", "single_word": "+"}
    assert matches("sport/tennis/#", "sport/tennis", **args)
    assert matches("sport/tennis/#", "sport/tennis/player1/ranking", **args)
    assert matches("sport/+/player1", "sport/tennis/player1", **args)
    assert not matches("sport/+", "sport/tennis/player1", **args)
    assert matches("a.b/*", "a.b/*", **args)             # '.' and '*' are ordinary here
    assert not matches("a.b/*", "a.b/x", **args)


def test_escaped_wildcard_characters_are_literal():
    assert matches("a.\\*", "a.*")
    assert not matches("a.\\*", "a.b")
    assert matches("a.\\#", "a.#")
    assert not matches("a.\\#", "a")


def test_is_wild():
    assert is_wild("a.*")
    assert is_wild("a.#")
    assert is_wild("#")
    assert not is_wild("a.b")
    assert not is_wild("a.\\*")
    assert not is_wild("a.\\#")
    assert is_wild("a.\\*.*")
    assert is_wild("a/+", delimiter="/", single_word="+")
    assert not is_wild("a.*", single_word="+", any_words="#")
    with pytest.raises(TypeError):
        is_wild(None)


@pytest.mark.parametrize("match", ["a.#.b", "hjhjhjhjh.#.hhh", "#.a", "a.#.#", "##"])
def test_any_words_anywhere_but_last_is_refused(match):
    with pytest.raises(ConfigError) as caught:
        verify_match(match)
    assert isinstance(caught.value, ValueError)
    assert match in str(caught.value)
    with pytest.raises(ConfigError):
        HierarchicalRepository().add(match, "value")


@pytest.mark.parametrize("match", ["#", "a.#", "a.b.#", "a#", "a.*.b", "a.\\#.b", ""])
def test_valid_settings_matches(match):
    verify_match(match)


def test_none_match_is_a_type_error():
    with pytest.raises(TypeError):
        verify_match(None)
    with pytest.raises(TypeError):
        HierarchicalRepository().add(None, "value")
    with pytest.raises(TypeError):
        HierarchicalRepository().get(None)


@pytest.mark.parametrize("kwargs", [{"delimiter": ".."}, {"single_word": ""}, {"any_words": "."},
                                    {"delimiter": "\\"}, {"single_word": "#"}])
def test_bad_wildcard_configuration_is_refused(kwargs):
    with pytest.raises(ConfigError):
        HierarchicalRepository(**kwargs)
    with pytest.raises(ConfigError):
        matches("a", "a", **kwargs)


def test_public_module_path():
    assert journal_engine.wildcard.matches("a.b.#", "a.b")
    assert not journal_engine.wildcard.is_wild("a.b")


# --------------------------------------------------------------------------- repository precedence

def test_multiple_wildcards_artemis_repository_test():
    repository = HierarchicalRepository()
    for match in ["#", "a", "a.#", "a.*", "a.b.c", "a.*.c", "a.d.c", "a.b.#", "a.b", "a.b.c.#", "a.b.c.d",
                  "a.*.*.d", "a.*.d.#"]:
        repository.add(match, match)
    expected = {
        "a": "a", "a.b": "a.b", "a.x": "a.*", "a.b.x": "a.b.#", "a.b.c": "a.b.c", "a.d.c": "a.d.c",
        "a.x.c": "a.*.c", "a.b.c.d": "a.b.c.d", "a.x.c.d": "a.*.*.d", "a.b.x.d": "a.*.*.d",
        "a.d.x.d": "a.*.*.d", "a.d.d.g": "a.*.d.#", "zzzz.z.z.z.d.r.g.f.sd.s.fsdfd.fsdfs": "#",
    }
    for address, value in expected.items():
        assert repository.get(address) == value, address


def test_matching_docs_artemis_repository_test():
    repository = HierarchicalRepository()
    repository.add("a.b.#", "ab#")
    repository.add("a.b.d.#", "abd#")
    repository.add("#", "root")
    assert repository.get("a.b") == "ab#"
    assert repository.get("a.b.c") == "ab#"
    assert repository.get("a.b.d.lll") == "abd#"
    assert repository.get("z.z.z.z.z") == "root"


def test_repository_merge_order_artemis_repository_test():
    repository = HierarchicalRepository()
    for i, match in enumerate(["#", "a.#", "b.#", "a.b.#", "b.c.#", "a.b.c.#", "a.b.*.d", "a.b.c.*"], start=1):
        repository.add(match, i)
    assert repository.matching_keys("a.b.c.d") == ["a.b.c.*", "a.b.*.d", "a.b.c.#", "a.b.#", "a.#", "#"]
    assert repository.matches("a.b.c.d") == [8, 7, 6, 4, 2, 1]
    assert repository.matching_keys("a.b.c") == ["a.b.c.#", "a.b.#", "a.#", "#"]
    assert repository.matching_keys("z") == ["#"]
    assert repository.get("a.b.c.d") == 8


def test_a_match_without_any_words_beats_one_with_it_whatever_its_words():
    repository = HierarchicalRepository()
    repository.add("foo.0.#", "hash")
    repository.add("foo.*", "star")
    assert repository.matching_keys("foo.0") == ["foo.*", "foo.0.#"]


def test_single_word_ranking_by_first_differing_word_and_word_count():
    repository = HierarchicalRepository()
    repository.add("*.b.c", "first-star")
    repository.add("a.*.c", "second-star")
    repository.add("a.b.*", "third-star")
    assert repository.matching_keys("a.b.c") == ["a.b.*", "a.*.c", "*.b.c"]


def test_exact_match_comes_first_and_no_match_gives_the_default():
    repository = HierarchicalRepository()
    repository.add("#", "root")
    repository.add("orders", "exact")
    assert repository.matching_keys("orders") == ["orders", "#"]
    assert HierarchicalRepository().get("x") is None
    repository = HierarchicalRepository()
    repository.set_default("fallback")
    assert repository.get("x") == "fallback"
    repository.add("x", "value")
    assert repository.get("x") == "value"


def test_literal_match_markers_artemis_repository_test():
    repository = HierarchicalRepository(literal_markers="()")
    repository.add("#", "#")
    repository.add("a.#", "a.#")
    repository.add("a.*", "a.*")
    repository.add("(a.#)", "literal")
    assert repository.matching_keys("a.b") == ["a.*", "a.#", "#"]
    assert repository.get("a.b") == "a.*"
    assert repository.matching_keys("a.#") == ["(a.#)", "a.*", "a.#", "#"]
    assert repository.get("a.#") == "literal"


def test_literal_without_markers_configured_is_an_ordinary_match():
    repository = HierarchicalRepository()
    repository.add("(a.b)", "x")
    assert repository.get("(a.b)") == "x"
    assert repository.get("a.b") is None


def test_literal_and_exact_of_the_same_name_and_their_removal():
    repository = HierarchicalRepository(literal_markers="()")
    repository.add("a.b", "exact")
    repository.add("(a.b)", "literal")
    assert repository.matches("a.b") == ["exact", "literal"]
    assert repository.remove("(a.b)")
    assert repository.matches("a.b") == ["exact"]
    repository.add("(a.b)", "literal")
    assert repository.remove("a.b")          # an unmarked name removes exact and literal, as Artemis does
    assert repository.matches("a.b") == []
    assert not repository.remove("a.b")


@pytest.mark.parametrize("markers", ["(", "``", "[]"])
def test_literal_markers_of_one_or_two_characters(markers):
    repository = HierarchicalRepository(literal_markers=markers)
    start, end = markers[0], markers[-1]
    repository.add(f"{start}orders.#{end}", "literal")
    repository.add("orders.#", "wild")
    assert repository.get("orders.#") == "literal"
    assert repository.get("orders.x") == "wild"


@pytest.mark.parametrize("markers", ["", "abc", "..", "(#"])
def test_bad_literal_markers_are_refused(markers):
    with pytest.raises(ConfigError):
        HierarchicalRepository(literal_markers=markers)


def test_escaped_exact_match_names_the_literal_address():
    repository = HierarchicalRepository()
    repository.add("orders.\\#", "escaped")
    repository.add("orders.#", "wild")
    assert repository.get("orders.#") == "escaped"
    assert repository.get("orders.x") == "wild"
    assert "orders.\\#" in repository


def test_configured_characters_in_the_repository():
    repository = HierarchicalRepository(delimiter="/", any_words="#", single_word="+")
    repository.add("sport/#", "sport")
    repository.add("sport/+/player1", "player1")
    repository.add("sport/tennis/#", "tennis")
    assert repository.get("sport/tennis/player1") == "player1"
    assert repository.matching_keys("sport/tennis/player1") == ["sport/+/player1", "sport/tennis/#", "sport/#"]
    assert repository.get("sport") == "sport"
    with pytest.raises(ConfigError):
        repository.add("sport/#/x", "bad")


def test_cache_invalidation_as_artemis_does_it():
    repository = HierarchicalRepository()
    repository.add("#", "root")
    assert repository.get("a") == "root" and repository.get("b") == "root"
    assert repository.cache_size() == 2
    repository.add("a", "exact-a")            # an exact match evicts only its own address
    assert repository.cache_size() == 1
    assert repository.get("a") == "exact-a"
    repository.add("b.*", "wild")             # a wildcard clears everything
    assert repository.cache_size() == 0
    assert repository.get("b.x") == "wild"
    repository.remove("b.*")
    assert repository.cache_size() == 0
    assert repository.get("b.x") == "root"
    repository.set_default("d")
    assert repository.cache_size() == 0
    repository.remove("#")
    assert repository.get("b.x") == "d"


def test_replacing_a_match_keeps_one_entry():
    repository = HierarchicalRepository()
    repository.add("a.#", 1)
    repository.add("a.#", 2)
    assert len(repository) == 1
    assert repository.get("a.b") == 2
    assert repository.items() == [("a.#", 2)]


def test_concurrent_lookups_and_changes_stay_consistent():
    repository = AddressSettingsRepository()
    repository.add("#", AddressSettings(max_delivery_attempts=1))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                value = repository.get("q.1").max_delivery_attempts
                assert value in (1, 2)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(300):
        repository.add("q.*", AddressSettings(max_delivery_attempts=2))
        repository.remove("q.*")
    repository.add("q.*", AddressSettings(max_delivery_attempts=2))
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert repository.get("q.1").max_delivery_attempts == 2


# ------------------------------------------------------------------------------------ AddressSettings

def test_defaults_resolve_as_artemis():
    settings = AddressSettings().resolved()
    assert settings.max_delivery_attempts == 10
    assert settings.redelivery_delay == 0
    assert settings.redelivery_delay_multiplier == 1.0
    assert settings.max_redelivery_delay == 0
    assert settings.redelivery_collision_avoidance_factor == 0.0
    assert settings.dead_letter_address is None
    assert settings.auto_create_dead_letter_resources is False
    assert settings.dead_letter_queue_prefix == "DLQ."
    assert settings.dead_letter_queue_suffix == ""
    assert settings.expiry_address is None
    assert settings.auto_create_expiry_resources is False
    assert settings.expiry_queue_prefix == "EXP."
    assert settings.expiry_queue_suffix == ""
    assert settings.expiry_delay == -1
    assert settings.redelivery_delays == ()
    assert AddressSettings(redelivery_delay=700).resolved().max_redelivery_delay == 7000


def test_every_field_defaults_to_unset():
    settings = AddressSettings()
    assert all(getattr(settings, field.name) is None for field in dataclasses.fields(settings))
    assert settings.set_fields() == {}


@pytest.mark.parametrize("field, value", [
    ("redelivery_collision_avoidance_factor", 1.5),
    ("redelivery_collision_avoidance_factor", -0.1),
    ("redelivery_collision_avoidance_factor", float("nan")),
    ("redelivery_delay", -1),
    ("max_redelivery_delay", -5),
    ("redelivery_delay", 1.5),
    ("redelivery_delay", True),
    ("redelivery_delay_multiplier", -2.0),
    ("redelivery_delay_multiplier", float("inf")),
    ("max_delivery_attempts", 2**31),
    ("max_delivery_attempts", "3"),
    ("expiry_delay", -2),
    ("dead_letter_address", 5),
    ("auto_create_dead_letter_resources", "yes"),
    ("redelivery_delays", [100, -1]),
    ("redelivery_delays", "100,200"),
])
def test_bad_values_are_refused_naming_field_and_value(field, value):
    with pytest.raises(ConfigError) as caught:
        AddressSettings(**{field: value})
    assert field in str(caught.value)
    assert caught.value.field.startswith(field)


def test_values_artemis_accepts_are_accepted():
    AddressSettings(max_delivery_attempts=-1)                  # redeliver forever
    AddressSettings(max_delivery_attempts=0)                   # also forever in Artemis
    AddressSettings(redelivery_delay_multiplier=0.5)           # a shrinking back-off
    AddressSettings(redelivery_collision_avoidance_factor=0.0)
    AddressSettings(redelivery_collision_avoidance_factor=1.0)
    AddressSettings(expiry_delay=-1)
    AddressSettings(dead_letter_address="")                    # an empty DLA: messages are dropped
    assert AddressSettings(redelivery_delay_multiplier=2).redelivery_delay_multiplier == 2.0
    assert AddressSettings(redelivery_delays=[1, 2]).redelivery_delays == (1, 2)


def test_settings_are_immutable_and_replace_checks_values():
    settings = AddressSettings(redelivery_delay=5)
    with pytest.raises(AttributeError):
        settings.redelivery_delay = 6
    assert settings.replace(redelivery_delay=6).redelivery_delay == 6
    with pytest.raises(ConfigError):
        settings.replace(redelivery_delay=-6)


def test_merged_with_takes_each_field_from_the_most_specific_setting():
    specific = AddressSettings(redelivery_delay=100, dead_letter_address=None)
    general = AddressSettings(redelivery_delay=999, dead_letter_address="DLA", max_delivery_attempts=3)
    merged = specific.merged_with(general)
    assert (merged.redelivery_delay, merged.dead_letter_address, merged.max_delivery_attempts) == (100, "DLA", 3)
    assert merged.max_redelivery_delay is None         # still unset: resolved only after the merge


def test_repository_merges_field_by_field_and_derives_defaults_after_the_merge():
    repository = AddressSettingsRepository()
    repository.add("#", AddressSettings(dead_letter_address="DLA", max_redelivery_delay=4000))
    repository.add("orders.#", AddressSettings(max_delivery_attempts=3, redelivery_delay=1000))
    repository.add("orders.eu", AddressSettings(redelivery_delay=500))
    eu = repository.get("orders.eu")
    assert (eu.redelivery_delay, eu.max_delivery_attempts, eu.dead_letter_address) == (500, 3, "DLA")
    assert eu.max_redelivery_delay == 4000            # an explicit cap from a less specific match applies
    repository.remove("#")
    assert repository.get("orders.eu").max_redelivery_delay == 5000    # then the derived default: 500 x 10
    assert repository.get("orders.us").max_redelivery_delay == 10000
    assert repository.get("orders.us").dead_letter_address is None


def test_repository_default_is_returned_only_when_no_match_applies():
    repository = AddressSettingsRepository()
    repository.set_default(AddressSettings(max_delivery_attempts=5, dead_letter_address="DEFAULT-DLA"))
    repository.add("orders.#", AddressSettings(redelivery_delay=10))
    assert repository.get("billing").max_delivery_attempts == 5
    assert repository.get("billing").dead_letter_address == "DEFAULT-DLA"
    merged = repository.get("orders.x")
    assert merged.max_delivery_attempts == 10          # the default is not merged into matches
    assert merged.dead_letter_address is None
    assert repository.merged("billing") is None
    assert repository.merged("orders.x") == AddressSettings(redelivery_delay=10)


def test_repository_get_resolves_every_field():
    repository = AddressSettingsRepository()
    repository.add("a", AddressSettings(redelivery_delay=1))
    for settings in (repository.get("a"), repository.get("nothing")):
        resolved = settings.set_fields()
        assert set(resolved) >= {"max_delivery_attempts", "redelivery_delay", "redelivery_delay_multiplier",
                                 "max_redelivery_delay", "redelivery_collision_avoidance_factor",
                                 "auto_create_dead_letter_resources", "dead_letter_queue_prefix",
                                 "dead_letter_queue_suffix", "auto_create_expiry_resources",
                                 "expiry_queue_prefix", "expiry_queue_suffix", "expiry_delay", "redelivery_delays"}


def test_repository_holds_only_address_settings():
    with pytest.raises(TypeError):
        AddressSettingsRepository().add("#", {"redelivery_delay": 5})


# ----------------------------------------------------------------------------------------------- XML

MANUAL_DELAY_EXAMPLE = """
<address-setting match="exampleQueue">
   <!-- default is 1.0 -->
   <redelivery-delay-multiplier>1.5</redelivery-delay-multiplier>
   <!-- default is 0 (no delay) -->
   <redelivery-delay>5000</redelivery-delay>
   <!-- default is 0.0) -->
   <redelivery-collision-avoidance-factor>0.15</redelivery-collision-avoidance-factor>
   <!-- default is redelivery-delay * 10 -->
   <max-redelivery-delay>50000</max-redelivery-delay>
</address-setting>
"""


def test_from_xml_reads_the_manuals_delayed_redelivery_example():
    settings = AddressSettings.from_xml(MANUAL_DELAY_EXAMPLE)
    assert settings == AddressSettings(redelivery_delay_multiplier=1.5, redelivery_delay=5000,
                                       redelivery_collision_avoidance_factor=0.15, max_redelivery_delay=50000)


def test_from_xml_reads_a_run_of_child_elements():
    settings = AddressSettings.from_xml(
        "<dead-letter-address>deadLetterAddress</dead-letter-address><max-delivery-attempts>3</max-delivery-attempts>")
    assert settings == AddressSettings(dead_letter_address="deadLetterAddress", max_delivery_attempts=3)


def test_from_xml_auto_create_example_with_namespace_case_and_whitespace():
    settings = AddressSettings.from_xml("""<?xml version="1.0" encoding="UTF-8"?>
        <address-setting xmlns="urn:activemq:core" match="#">
          <dead-letter-address> DLA </dead-letter-address>
          <max-delivery-attempts>3</max-delivery-attempts>
          <Auto-Create-Dead-Letter-Resources>TRUE</Auto-Create-Dead-Letter-Resources>
          <dead-letter-queue-suffix>.DLQ</dead-letter-queue-suffix>
          <expiry-address/>
          <redelivery-delays>100, 1000 5000</redelivery-delays>
        </address-setting>""")
    assert settings == AddressSettings(dead_letter_address="DLA", max_delivery_attempts=3,
                                       auto_create_dead_letter_resources=True, dead_letter_queue_suffix=".DLQ",
                                       expiry_address="", redelivery_delays=(100, 1000, 5000))


@pytest.mark.parametrize("xml, element, value", [
    ("<redelivery-delay>soon</redelivery-delay>", "redelivery-delay", "soon"),
    ("<redelivery-delay>-5</redelivery-delay>", "redelivery-delay", "-5"),
    ("<redelivery-collision-avoidance-factor>1.5</redelivery-collision-avoidance-factor>",
     "redelivery-collision-avoidance-factor", "1.5"),
    ("<max-delivery-attempts>3000000000</max-delivery-attempts>", "max-delivery-attempts", "3000000000"),
    ("<auto-create-expiry-resources>yes</auto-create-expiry-resources>", "auto-create-expiry-resources", "yes"),
    ("<redelivery-delay>${delay}</redelivery-delay>", "redelivery-delay", "${delay}"),
    ("<redelivery-dealy>5</redelivery-dealy>", "redelivery-dealy", "redelivery-dealy"),
    ("<redelivery-delay><x/></redelivery-delay>", "redelivery-delay", "redelivery-delay"),
])
def test_from_xml_bad_input_names_element_and_value(xml, element, value):
    with pytest.raises(ConfigError) as caught:
        AddressSettings.from_xml(xml)
    message = str(caught.value)
    assert element in message and value in message


def test_from_xml_ignores_artemis_elements_it_does_not_model():
    settings = AddressSettings.from_xml(
        "<max-size-bytes>-1</max-size-bytes><address-full-policy>PAGE</address-full-policy>"
        "<redelivery-delay>7</redelivery-delay>")
    assert settings == AddressSettings(redelivery_delay=7)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<configuration><core><address-settings><address-setting match="#">
<dead-letter-address>&lol2;</dead-letter-address></address-setting></address-settings></core></configuration>"""


@pytest.mark.parametrize("xml", [
    BILLION_LAUGHS,
    '<!DOCTYPE configuration SYSTEM "http://example.com/evil.dtd"><configuration/>',
])
def test_doctype_and_entity_declarations_are_refused(xml):
    with pytest.raises(ConfigError, match="DOCTYPE|ENTITY"):
        AddressSettingsRepository.from_broker_xml(xml)
    with pytest.raises(ConfigError):
        AddressSettings.from_xml(xml)


def test_a_lower_case_doctype_is_not_xml_and_is_refused_too():
    with pytest.raises(ConfigError, match="not well-formed"):
        AddressSettingsRepository.from_broker_xml('<!doctype configuration><configuration/>')


def test_malformed_xml_is_a_config_error_with_position():
    with pytest.raises(ConfigError, match="line 1"):
        AddressSettingsRepository.from_broker_xml("<configuration><core></configuration>")


BROKER_XML = """<?xml version='1.0'?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
               xsi:schemaLocation="urn:activemq /schema/artemis-configuration.xsd">
   <core xmlns="urn:activemq:core" xsi:schemaLocation="urn:activemq:core ">
      <name>0.0.0.0</name>
      <persistence-enabled>true</persistence-enabled>
      <max-redelivery-records>1</max-redelivery-records>
      <persist-delivery-count-before-delivery>true</persist-delivery-count-before-delivery>
      <wildcard-addresses>
         <routing-enabled>true</routing-enabled>
         <delimiter>/</delimiter>
         <any-words>#</any-words>
         <single-word>+</single-word>
      </wildcard-addresses>
      <literal-match-markers>()</literal-match-markers>
      <address-settings>
         <!-- if you define auto-create on certain queues, management has to be auto-create -->
         <address-setting match="activemq/management#">
            <dead-letter-address>DLQ</dead-letter-address>
            <expiry-address>ExpiryQueue</expiry-address>
            <redelivery-delay>0</redelivery-delay>
            <max-size-bytes>-1</max-size-bytes>
            <message-counter-history-day-limit>10</message-counter-history-day-limit>
            <address-full-policy>PAGE</address-full-policy>
            <auto-create-queues>true</auto-create-queues>
            <auto-create-addresses>true</auto-create-addresses>
         </address-setting>
         <address-setting match="#">
            <dead-letter-address>DLQ</dead-letter-address>
            <expiry-address>ExpiryQueue</expiry-address>
            <redelivery-delay>1000</redelivery-delay>
            <max-delivery-attempts>5</max-delivery-attempts>
         </address-setting>
         <address-setting match="orders/+">
            <redelivery-delay-multiplier>2.0</redelivery-delay-multiplier>
         </address-setting>
         <address-setting match="(orders/#)">
            <max-delivery-attempts>-1</max-delivery-attempts>
         </address-setting>
      </address-settings>
   </core>
</configuration>
"""


def test_from_broker_xml_reads_settings_wildcards_and_literal_markers():
    repository = AddressSettingsRepository.from_broker_xml(BROKER_XML)
    assert (repository.delimiter, repository.any_words, repository.single_word) == ("/", "#", "+")
    assert repository.literal_markers == "()"
    assert len(repository) == 4
    eu = repository.get("orders/eu")
    assert (eu.redelivery_delay, eu.redelivery_delay_multiplier, eu.max_delivery_attempts) == (1000, 2.0, 5)
    assert eu.max_redelivery_delay == 10000
    assert eu.dead_letter_address == "DLQ" and eu.expiry_address == "ExpiryQueue"
    assert repository.get("orders/#").max_delivery_attempts == -1
    assert repository.get("activemq/management").redelivery_delay == 0
    assert ("#", "max-size-bytes") not in repository.ignored_elements
    assert ("activemq/management#", "max-size-bytes") in repository.ignored_elements


def test_read_artemis_broker_xml_also_reads_the_two_redelivery_switches(tmp_path):
    path = tmp_path / "broker.xml"
    path.write_text(BROKER_XML, encoding="utf-8")
    for source in (path, str(path), BROKER_XML.encode("utf-8")):
        config = read_artemis_broker_xml(source)
        assert config.max_redelivery_records == 1
        assert config.persist_delivery_count_before_delivery is True
        assert config.wildcard_routing_enabled is True
        assert len(config.address_settings) == 4
    minimal = read_artemis_broker_xml("<configuration><address-settings/></configuration>")
    assert minimal.max_redelivery_records is None and minimal.persist_delivery_count_before_delivery is None
    assert len(minimal.address_settings) == 0


def test_from_broker_xml_accepts_settings_directly_under_configuration_as_artemis_tests_write_them():
    repository = AddressSettingsRepository.from_broker_xml(
        '<configuration><literal-match-markers>()</literal-match-markers><address-settings>'
        '<address-setting match="(foo)"><redelivery-delay>42</redelivery-delay></address-setting>'
        '</address-settings></configuration>')
    assert repository.get("foo").redelivery_delay == 42


@pytest.mark.parametrize("xml, fragment", [
    ('<configuration><address-settings><address-setting match="a.#.b"/></address-settings></configuration>',
     "a.#.b"),
    (('<configuration><address-settings><address-setting><redelivery-delay>1</redelivery-delay>'
      '</address-setting></address-settings></configuration>'), "match attribute"),
    (('<configuration><address-settings><address-setting match="#"><redelivery-delay>x</redelivery-delay>'
      '</address-setting></address-settings></configuration>'), "redelivery-delay"),
    ('<configuration><address-settings><queue-setting match="#"/></address-settings></configuration>',
     "queue-setting"),
    ('<configuration><wildcard-addresses><delimiter>::</delimiter></wildcard-addresses></configuration>',
     "delimiter"),
    ('<configuration><wildcard-addresses><separator>/</separator></wildcard-addresses></configuration>',
     "separator"),
    ('<configuration><wildcard-addresses><single-word>#</single-word></wildcard-addresses></configuration>',
     "wildcard-addresses"),
    ('<configuration><max-redelivery-records>-2</max-redelivery-records></configuration>',
     "max-redelivery-records"),
    ('<beans xmlns="http://www.springframework.org/schema/beans"/>', "beans"),
])
def test_from_broker_xml_bad_input_names_the_element(xml, fragment):
    with pytest.raises(ConfigError) as caught:
        read_artemis_broker_xml(xml)
    assert fragment in str(caught.value)


def test_from_broker_xml_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        AddressSettingsRepository.from_broker_xml(tmp_path / "nope.xml")


def test_latin1_declared_encoding_is_honoured():
    data = ('<?xml version="1.0" encoding="ISO-8859-1"?><configuration><address-settings>'
            '<address-setting match="caf\u00e9"><redelivery-delay>3</redelivery-delay></address-setting>'
            '</address-settings></configuration>').encode("latin-1")
    assert AddressSettingsRepository.from_broker_xml(data).get("caf\u00e9").redelivery_delay == 3

"""The web inspector in a real browser: headless Debian Chromium driven by Selenium against a
real `colloquy serve` on loopback (docs/inspector.md).

Run by tests/inspector/run.sh. Every wait is bounded (WAIT seconds); nothing asserts a
duration. Screenshots and the performance report go to $COLLOQUY_INSPECTOR_OUT (default
target/inspector-screenshots).
"""

import gzip
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BINARY = Path(os.environ.get("COLLOQUY_BIN", TARGET / "debug" / "colloquy"))
OUT = Path(os.environ.get("COLLOQUY_INSPECTOR_OUT", TARGET / "inspector-screenshots"))
#: The longest any one wait may take, in seconds.
WAIT = 20

AGENTS = ["alice", "bob", "carol", "dave", "buyer", "s1", "s2"]
ADMIN = "inspector-admin-token"


def token(agent):
    return f"{agent}-inspector-token"


def errand(answer):
    """A one-step protocol: alice requests, bob answers with `answer`. A candidate that wants
    `agree` where the active revision takes `inform` refuses bob's inform: its shadow twin
    diverges at step 1."""
    return f"""apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata:
  name: errand
  version: 1.0.0
spec:
  roles:
    participants: {{ min: 1, max: 1 }}
  enforcement: enforce
  thread:
    initial: start
    on_expiry: expired
    states:
      start:
        transitions:
          - {{ performative: request, from: initiator, to: asked }}
      asked:
        transitions:
          - {{ performative: {answer}, from: participant, to: done }}
      done: {{ terminal: success }}
      expired: {{ terminal: timeout }}
"""


def templates_with_a_hook(directory):
    """The built-in templates and the auto-responder example, its WAT hook assembled with
    wabt's wat2wasm (scripts/setup.sh installs it), in `directory`."""
    directory.mkdir()
    for template in (ROOT / "templates").glob("*.yaml"):
        shutil.copy(template, directory)
    example = ROOT / "templates" / "examples" / "auto-responder"
    shutil.copy(example / "auto-responder.yaml", directory)
    subprocess.run(["wat2wasm", str(example / "auto_responder.wat"), "-o",
                    str(directory / "auto_responder.wasm")], check=True, timeout=WAIT)
    return directory


class Server:
    """A `colloquy serve` on 127.0.0.1:0 with a memory store."""

    def __init__(self, directory, agents_file=None, templates=ROOT / "templates"):
        args = [str(BINARY), "serve", "--listen", "127.0.0.1:0", "--store", "memory",
                "--templates", str(templates), "--data-dir", str(directory)]
        if agents_file:
            args += ["--agents", str(agents_file)]
        self.log = open(Path(directory) / "serve.log", "wb")
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log,
                                        stdin=subprocess.DEVNULL,
                                        env={**os.environ, "RUST_LOG": "warn"})
        found = queue.Queue()

        def read():
            for line in self.process.stdout:
                text = line.decode(errors="replace").strip()
                if text.startswith("colloquy listening on "):
                    found.put(text.removeprefix("colloquy listening on "))
            # Keeps the pipe drained until the server exits.

        threading.Thread(target=read, daemon=True).start()
        try:
            self.url = found.get(timeout=WAIT)
        except queue.Empty:
            self.stop()
            raise RuntimeError(f"colloquy serve did not start; see {directory}/serve.log")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=WAIT)
        self.process.stdout.close()
        self.log.close()

    def call(self, method, path, who=None, body=None, agent_header=None, yaml=None):
        """The API's JSON answer; raises urllib.error.HTTPError on a 4xx or 5xx. `body` is
        sent as JSON, `yaml` as a template's text."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if who:
            headers["Authorization"] = f"Bearer {who}"
        if agent_header:
            headers["X-Agent-Id"] = agent_header
        data = json.dumps(body).encode() if body is not None else None
        if yaml is not None:
            headers["Content-Type"] = "application/yaml"
            data = yaml.encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=headers)
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            raw = response.read()
            return json.loads(raw) if raw else None

    def start(self, agent, template, participants, performative, content):
        return self.call("POST", "/v1/conversations", token(agent), {
            "template": template, "participants": participants,
            "message": {"performative": performative, "content": content}})

    def send(self, agent, conversation, performative, content, to=None):
        body = {"performative": performative, "content": content}
        if to:
            body["to"] = to
        return self.call("POST", f"/v1/conversations/{conversation}/messages", token(agent), body)


def browser(width=1280, height=800):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size={width},{height}",
                     "--no-first-run", "--disable-extensions"]:
        options.add_argument(argument)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


def setUpModule():
    global SERVER, DRIVER, WORK
    if not BINARY.exists():
        raise RuntimeError(f"{BINARY} is missing: build it with `cargo build -p colloquy`")
    OUT.mkdir(parents=True, exist_ok=True)
    WORK = tempfile.mkdtemp(prefix="colloquy-inspector-")
    agents_file = Path(WORK) / "agents.yaml"
    lines = [f'admin_token: "{ADMIN}"', "agents:"]
    lines += [f'  - {{id: {a}, token: "{token(a)}"}}' for a in AGENTS]
    agents_file.write_text("\n".join(lines) + "\n")
    SERVER = Server(WORK, agents_file, templates_with_a_hook(Path(WORK) / "templates"))
    try:
        DRIVER = browser()
    except Exception:
        SERVER.stop()
        raise


def tearDownModule():
    DRIVER.quit()
    SERVER.stop()
    shutil.rmtree(WORK, ignore_errors=True)


def wait_for(condition, what):
    # The page redraws as events arrive: an element found just before a redraw is stale by
    # the time it is read, which only means "not yet", so the wait asks again.
    try:
        return WebDriverWait(
            DRIVER, WAIT, poll_frequency=0.1,
            ignored_exceptions=(StaleElementReferenceException, NoSuchElementException),
        ).until(lambda d: condition())
    except TimeoutException:
        shot = OUT / ("failed-" + "".join(c if c.isalnum() else "-" for c in what)[:60] + ".png")
        DRIVER.save_screenshot(str(shot))
        raise AssertionError(f"timed out waiting for {what} (screenshot {shot})") from None


def open_as(credential, hash_path, server=None):
    """Opens the inspector of `server` (the module's by default) at `hash_path` signed in with
    `credential` (through the form)."""
    url = (server or SERVER).url
    DRIVER.get(url + "/inspect")
    DRIVER.execute_script("sessionStorage.clear()")
    DRIVER.get(url + "/inspect#/conversations")
    field = wait_for(lambda: DRIVER.find_elements(By.ID, "credential"), "the sign-in form")[0]
    field.send_keys(credential)
    DRIVER.find_element(By.ID, "signin").click()
    wait_for(lambda: not DRIVER.find_elements(By.ID, "credential"), "signing in")
    DRIVER.get(url + "/inspect#" + hash_path)


def arrows():
    """The diagram's message arrows, in the order drawn (seq order)."""
    found = DRIVER.execute_script("""
        return [...document.querySelectorAll('#sequence g.msg')].map((g) => ({
            seq: Number(g.dataset.seq), performative: g.dataset.performative,
            from: g.dataset.from, to: g.dataset.to}));""")
    return sorted(found, key=lambda a: a["seq"])


def screenshot(name):
    DRIVER.save_screenshot(str(OUT / f"{name}.png"))


class Inspector(unittest.TestCase):
    def tearDown(self):
        DRIVER.set_window_size(1280, 800)

    def test_a_started_conversation_is_listed_and_drawn_in_order(self):
        started = SERVER.start("alice", "fipa-request", ["bob"], "request",
                               {"action": "book-room", "room": "Lovelace"})
        conversation = started["id"]
        SERVER.send("bob", conversation, "agree", {})
        SERVER.send("bob", conversation, "inform", {"done": True, "booking": "LV-0412"})
        open_as(ADMIN, "/conversations")
        row = wait_for(lambda: DRIVER.find_elements(
            By.CSS_SELECTOR, f'#conversations tr[data-id="{conversation}"]'), "the listed row")[0]
        self.assertIn("fipa-request", row.text)
        # Newest first: the conversation started last (UUIDv7 ids grow) heads the list.
        listed = [r.get_attribute("data-id")
                  for r in DRIVER.find_elements(By.CSS_SELECTOR, "#conversations tbody tr")]
        self.assertEqual(listed, sorted(listed, reverse=True))
        self.assertEqual(listed[0], conversation)
        wait_for(lambda: "started" in DRIVER.find_element(By.ID, "counts").text, "the counts")
        screenshot("conversations")
        row.find_element(By.TAG_NAME, "a").click()
        wait_for(lambda: len(arrows()) == 3, "three arrows")
        self.assertEqual([(a["performative"], a["from"], a["to"]) for a in arrows()],
                         [("request", "alice", "bob"), ("agree", "bob", "alice"),
                          ("inform", "bob", "alice")])
        wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "#sequence g.note.end"),
                 "the completion mark")
        notes = DRIVER.execute_script(
            "return [...document.querySelectorAll('#sequence g.note')].map((g) => "
            "g.dataset.tone + ':' + g.textContent)")
        self.assertTrue(any(n.startswith("state:") and "requested → agreed" in n for n in notes),
                        notes)
        self.assertTrue(any(n.startswith("commit:") for n in notes), notes)
        self.assertTrue(any(n.startswith("end:") and "success" in n for n in notes), notes)
        # A message's JSON on click.
        DRIVER.execute_script(
            "document.querySelector('#sequence g.msg[data-performative=\"inform\"] .hit')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        # The side panel redraws as events arrive: the JSON is read inside the wait.
        shown = wait_for(lambda: [e.text for e in DRIVER.find_elements(By.ID, "message-json")],
                         "the message JSON")
        self.assertIn("LV-0412", shown[0])
        self.assertIn("done", DRIVER.find_element(By.ID, "threads").text)
        # And from the keyboard: up from the inform is the agree.
        DRIVER.find_element(By.ID, "sequence").send_keys(Keys.ARROW_UP)
        wait_for(lambda: '"performative": "agree"' in
                 DRIVER.find_element(By.ID, "message-json").text, "the agree's JSON")
        screenshot("conversation")

    def test_a_message_sent_while_the_page_is_open_appears_without_reload(self):
        conversation = SERVER.start("alice", "fipa-request", ["bob"], "request",
                                    {"action": "water-plants"})["id"]
        open_as(token("alice"), f"/c/{conversation}")
        wait_for(lambda: len(arrows()) == 1, "the request's arrow")
        wait_for(lambda: DRIVER.find_element(By.ID, "live-state").text == "live", "a live stream")
        DRIVER.execute_script("window.stillTheSamePage = true")
        SERVER.send("bob", conversation, "agree", {})
        wait_for(lambda: len(arrows()) == 2, "the agree arrow")
        SERVER.send("bob", conversation, "inform", {"done": True})
        wait_for(lambda: len(arrows()) == 3, "the inform arrow")
        self.assertEqual([a["performative"] for a in arrows()], ["request", "agree", "inform"])
        self.assertTrue(DRIVER.execute_script("return window.stillTheSamePage === true"),
                        "the page was reloaded")
        wait_for(lambda: "completed" in DRIVER.find_element(By.ID, "conv-status").text,
                 "the side panel's status")

    def test_a_templates_diagram_shows_its_states_and_transitions(self):
        document = SERVER.call("GET", "/v1/templates/fipa-request", ADMIN)
        thread = document["template"]["spec"]["thread"]
        open_as(ADMIN, "/templates")
        wait_for(lambda: DRIVER.find_elements(
            By.CSS_SELECTOR, '#templates tr[data-template="fipa-contract-net"]'), "the list")
        wait_for(lambda: DRIVER.find_elements(By.ID, "last-error"), "the reload status")
        screenshot("templates")
        DRIVER.get(SERVER.url + "/inspect#/templates/fipa-request")
        wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "#state-machine g.state"),
                 "the state machine")
        states = set(DRIVER.execute_script(
            "return [...document.querySelectorAll('#state-machine g.state')]"
            ".map((g) => g.dataset.state)"))
        self.assertEqual(states, set(thread["states"]))
        terminal = DRIVER.execute_script(
            "return Object.fromEntries([...document.querySelectorAll("
            "'#state-machine g.state.terminal')].map((g) => [g.dataset.state, g.dataset.terminal]))")
        self.assertEqual(terminal, {name: state["terminal"]
                                    for name, state in thread["states"].items()
                                    if "terminal" in state})
        edges = {tuple(e) for e in DRIVER.execute_script(
            "return [...document.querySelectorAll('#state-machine g.edge-label')].map((g) => "
            "[g.dataset.fromState, g.dataset.toState, g.dataset.performative, g.dataset.role,"
            " g.dataset.deadline])")}
        expected = {(name, t["to"], t["performative"], t["from"], "false")
                    for name, state in thread["states"].items()
                    for t in state.get("transitions", [])}
        expected |= {(name, state["on_deadline"], "", "", "true")
                     for name, state in thread["states"].items() if "on_deadline" in state}
        self.assertEqual(edges, expected)
        self.assertIn(("requested", "agreed", "agree", "participant", "false"), edges)
        self.assertIn(("requested", "timed_out", "", "", "true"), edges)
        screenshot("template")

    def test_the_hooks_and_agents_pages(self):
        # The auto-responder's hook answers as the engine: an arrow from the engine's lane.
        asked = SERVER.start("alice", "auto-responder", ["bob"], "query-ref", {"q": "open?"})
        open_as(ADMIN, f"/c/{asked['id']}")
        wait_for(lambda: any(a["from"] == "colloquy:engine" for a in arrows()),
                 "the hook's answer")
        document = SERVER.call("GET", "/v1/templates/auto-responder", ADMIN)
        DRIVER.get(SERVER.url + "/inspect#/hooks")
        row = wait_for(lambda: DRIVER.find_elements(
            By.CSS_SELECTOR, '#hooks tr[data-template="auto-responder"]'), "the hook's row")[0]
        for shown in ["auto_responder.wasm", "core module", "on_message", "fail_open",
                      document["hook_module"]["sha256"][:16]]:
            self.assertIn(shown, row.text)
        calls = wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "#hook-calls tbody tr"),
                         "the hook calls")
        self.assertTrue(any(r.text.startswith("on_message") for r in calls),
                        [r.text for r in calls])
        screenshot("hooks")
        DRIVER.get(SERVER.url + "/inspect#/agents")
        rows = wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "#agents tbody tr"),
                        "the agents")
        self.assertEqual([r.get_attribute("data-agent") for r in rows], sorted(AGENTS))
        screenshot("agents")
        # An agent sees itself only.
        open_as(token("bob"), "/agents")
        rows = wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "#agents tbody tr"),
                        "bob's row")
        self.assertEqual([r.get_attribute("data-agent") for r in rows], ["bob"])

    def test_an_agent_sees_neither_another_agents_conversation_nor_sealed_bids(self):
        private = SERVER.start("carol", "fipa-request", ["dave"], "request",
                               {"action": "secret"})["id"]
        tender = SERVER.start("buyer", "fipa-contract-net", ["s1", "s2"], "cfp",
                              {"task": "deliver 40 chairs"})["id"]
        SERVER.send("s1", tender, "propose", {"price": 1111})
        SERVER.send("s2", tender, "propose", {"price": 2222})
        open_as(token("alice"), "/conversations")
        wait_for(lambda: DRIVER.find_elements(By.ID, "conversations")
                 or "No conversations" in DRIVER.find_element(By.ID, "conversation-list").text,
                 "alice's list")
        self.assertNotIn(private, DRIVER.find_element(By.ID, "conversation-list").text)
        DRIVER.get(SERVER.url + f"/inspect#/c/{private}")
        alert = wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR, "[role=alert]"),
                         "a refusal")[0]
        self.assertIn("403", alert.text)
        self.assertNotIn("secret", DRIVER.find_element(By.ID, "main").text)
        screenshot("forbidden")
        # s1 sees the call and its own bid, not s2's.
        open_as(token("s1"), f"/c/{tender}")
        wait_for(lambda: len(arrows()) == 2, "s1's two arrows")
        self.assertEqual([(a["performative"], a["from"]) for a in arrows()],
                         [("cfp", "buyer"), ("propose", "s1")])
        page = DRIVER.find_element(By.ID, "main").text
        self.assertNotIn("2222", page)
        self.assertNotIn("2222", DRIVER.page_source)
        # The buyer sees both bids.
        open_as(token("buyer"), f"/c/{tender}")
        wait_for(lambda: len(arrows()) == 3, "the buyer's three arrows")
        self.assertEqual(sorted(a["from"] for a in arrows() if a["performative"] == "propose"),
                         ["s1", "s2"])

    def test_phone_width(self):
        conversation = SERVER.start("alice", "fipa-request", ["bob"], "request",
                                    {"action": "phone"})["id"]
        DRIVER.set_window_size(390, 844)
        open_as(token("alice"), f"/c/{conversation}")
        wait_for(lambda: len(arrows()) == 1, "the arrow")
        overflow = DRIVER.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        self.assertLessEqual(overflow, 1, "the page scrolls sideways at phone width")
        screenshot("conversation-phone")
        DRIVER.get(SERVER.url + "/inspect#/conversations")
        wait_for(lambda: DRIVER.find_elements(By.ID, "conversations"), "the list")
        screenshot("conversations-phone")

    def test_a_candidate_is_shown_next_to_the_active_revision_with_its_divergences(self):
        """Issue 39, section 4: a candidate staged over HTTP, shadowed on live traffic; the
        template page shows both revisions, the source and semantic diffs, the shadow's
        counts, each sample divergence linked to its conversation (whose page marks the
        step), the ramp, the commands and the history; an agent sees the history only."""
        directory = tempfile.mkdtemp(prefix="colloquy-inspector-rollout-")
        templates = Path(directory) / "templates"
        templates.mkdir()
        (templates / "errand.yaml").write_text(errand("inform"))
        server = Server(directory, Path(WORK) / "agents.yaml", templates)
        try:
            active = server.call("GET", "/v1/templates/errand", ADMIN)["revision"]
            staged = server.call("POST", "/v1/templates/errand/candidates?sample=1", ADMIN,
                                 yaml=errand("agree"))
            candidate = staged["revision"]
            self.assertNotEqual(candidate, active)
            ids = []
            for _ in range(2):
                started = server.start("alice", "errand", ["bob"], "request", {})
                server.send("bob", started["id"], "inform", {})
                ids.append(started["id"])
            report = None
            for _ in range(WAIT * 10):
                report = server.call("GET", "/v1/templates/errand/candidates", ADMIN)
                if report["candidates"][0]["shadow"]["diverged"] >= 2:
                    break
                time.sleep(0.1)
            shadow = report["candidates"][0]["shadow"]
            self.assertEqual(shadow["diverged"], 2, report)
            sample = shadow["samples"][0]
            self.assertIn(sample["conversation_id"], ids)
            self.assertEqual((sample["step"], sample["kind"]), (1, "refused"), sample)
            with self.assertRaises(urllib.error.HTTPError) as refused:
                server.call("GET", "/v1/templates/errand/candidates", token("alice"))
            self.assertEqual(refused.exception.code, 403)

            open_as(ADMIN, "/templates", server)
            listed = wait_for(lambda: DRIVER.find_elements(
                By.CSS_SELECTOR, '#templates tr[data-template="errand"] a[data-candidate]'),
                "the candidate in the list")[0]
            self.assertEqual(listed.text, candidate)
            DRIVER.get(server.url + "/inspect#/templates/errand")
            shown = wait_for(lambda: DRIVER.find_elements(By.ID, "candidate-revision"),
                             "the candidate")[0]
            self.assertEqual(shown.text, candidate)
            self.assertIn(active, DRIVER.find_element(By.ID, "active-side").text)
            changes = wait_for(lambda: DRIVER.find_elements(By.CSS_SELECTOR,
                                                            "#semantic-diff li"),
                               "the semantic diff")
            self.assertEqual(
                [c.text for c in changes],
                ["spec.thread.states.asked asked: agree/participant added (→ done)",
                 "spec.thread.states.asked asked: inform/participant removed (was → done)"])
            removed = [r.text for r in DRIVER.find_elements(By.CSS_SELECTOR,
                                                            "#source-diff tr.del td.code")]
            added = [r.text for r in DRIVER.find_elements(By.CSS_SELECTOR,
                                                          "#source-diff tr.add td.code")]
            self.assertEqual(len(removed), 1, removed)
            self.assertEqual(len(added), 1, added)
            self.assertTrue(removed[0].startswith("-"), removed)
            self.assertIn("- { performative: inform, from: participant, to: done }",
                          removed[0])
            self.assertTrue(added[0].startswith("+"), added)
            self.assertIn("- { performative: agree, from: participant, to: done }",
                          added[0])
            counts = {row.get_attribute("data-count"): row.find_element(
                By.CSS_SELECTOR, "td.num").text
                for row in DRIVER.find_elements(By.CSS_SELECTOR, "#shadow tr")}
            self.assertEqual(counts, {"shadowed": str(shadow["shadowed"]), "same": "0",
                                      "diverged": "2", "dropped": "0"})
            self.assertEqual(DRIVER.find_element(
                By.CSS_SELECTOR, '#shadow .pill[data-kind="refused"]').text, "refused 2")
            rows = DRIVER.find_elements(By.CSS_SELECTOR, "#divergences tbody tr")
            self.assertEqual(sorted(r.get_attribute("data-conversation") for r in rows),
                             sorted(s["conversation_id"] for s in shadow["samples"]))
            row = DRIVER.find_element(
                By.CSS_SELECTOR, f'#divergences tr[data-conversation="{ids[0]}"]')
            link = row.find_element(By.TAG_NAME, "a")
            self.assertTrue(link.get_attribute("href").endswith(f"#/c/{ids[0]}?step=1"),
                            link.get_attribute("href"))
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            self.assertEqual(cells[1], "1")
            self.assertTrue(cells[2].startswith("inform from bob at "), cells)
            self.assertIn("out_of_protocol", cells[3])
            self.assertIn("No ramp", DRIVER.find_element(By.ID, "no-ramp").text)
            commands = DRIVER.find_element(By.ID, "commands").text
            self.assertIn(f"colloquy templates promote errand {candidate} "
                          f"--server {server.url}", commands)
            self.assertIn(f"{server.url}/v1/templates/errand/candidates/{candidate}/promote",
                          commands)
            rollback = DRIVER.find_element(By.ID, "rollback-commands").text
            self.assertIn(f"colloquy templates rollback errand --server {server.url}",
                          rollback)
            self.assertIn(f"{server.url}/v1/templates/errand/rollback", rollback)
            self.assertNotIn(ADMIN, DRIVER.find_element(By.ID, "main").text)
            history = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                       for r in DRIVER.find_elements(By.CSS_SELECTOR, "#history tbody tr")]
            self.assertEqual([(h[1], h[2], h[3], h[4]) for h in history],
                             [("stage", candidate, active, "admin"),
                              ("reload", active, "—", "watcher")])
            # The whole view in one picture.
            DRIVER.set_window_size(1280, 2600)
            screenshot("template-candidate")
            DRIVER.set_window_size(1280, 800)

            # The sample's link: the conversation, its step marked (bob's inform).
            link.click()
            wait_for(lambda: len(arrows()) == 2, "the conversation's arrows")
            # Read inside the wait: the diagram may redraw between finding a step and reading it.
            marked = wait_for(lambda: [
                (m.get_attribute("data-performative"), m.get_attribute("data-from"))
                for m in DRIVER.find_elements(
                    By.CSS_SELECTOR, '#sequence g.msg[data-marked="true"]')], "the marked step")
            self.assertEqual(marked, [("inform", "bob")])
            self.assertIn("inform from bob", wait_for(
                lambda: DRIVER.find_element(By.ID, "step-mark").text, "the step's mark"))
            self.assertIn('"performative": "inform"', wait_for(
                lambda: DRIVER.find_element(By.ID, "message-json").text, "the step's message"))
            screenshot("conversation-step")

            # A ramp: its share, gates and per-side tallies.
            server.call("POST", f"/v1/templates/errand/candidates/{candidate}/ramp"
                        "?percent=50&abort_on=refusal_rate:5&min_conversations=3", ADMIN)
            DRIVER.get(server.url + "/inspect#/templates/errand")
            percent = wait_for(lambda: DRIVER.find_elements(By.ID, "ramp-percent"),
                               "the ramp")[0]
            self.assertEqual(percent.text, "50% of new conversations")
            self.assertIn("refusal_rate:5", DRIVER.find_element(By.ID, "ramp").text)
            self.assertIn("3 conversations", DRIVER.find_element(By.ID, "ramp").text)
            self.assertEqual([r.get_attribute("data-side") for r in DRIVER.find_elements(
                By.CSS_SELECTOR, "#ramp-tallies tbody tr")], ["candidate", "active"])
            self.assertIn("serves 50% of new conversations",
                          DRIVER.find_element(By.ID, "candidate-side").text)
            self.assertEqual(DRIVER.find_element(
                By.CSS_SELECTOR, "#history tbody tr").get_attribute("data-kind"), "ramp")

            # An agent: the history, and a note instead of the candidate.
            open_as(token("alice"), "/templates/errand", server)
            wait_for(lambda: DRIVER.find_elements(By.ID, "candidates-forbidden"),
                     "the note on candidates")
            self.assertEqual(len(DRIVER.find_elements(By.CSS_SELECTOR,
                                                      "#history tbody tr")), 3)
            self.assertFalse(DRIVER.find_elements(By.ID, "candidate"))
            self.assertNotIn("performative: agree", DRIVER.page_source)
            screenshot("template-candidate-agent")
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)

    def test_open_development_mode_is_said(self):
        directory = tempfile.mkdtemp(prefix="colloquy-inspector-open-")
        server = Server(directory)
        try:
            DRIVER.get(server.url + "/inspect")
            DRIVER.execute_script("sessionStorage.clear()")
            DRIVER.get(server.url + "/inspect#/conversations")
            banner = wait_for(lambda: [b for b in DRIVER.find_elements(By.ID, "banner")
                                       if b.is_displayed()], "the banner")[0]
            self.assertIn("Open development mode", banner.text)
            self.assertIn("Agent id", DRIVER.find_element(By.ID, "main").text)
            screenshot("open-mode")
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)

    def test_report_asset_size_and_render_time(self):
        """Reports (asserts nothing about) what the assets weigh and how long 10,000 messages
        between 50 parties take to draw (the page's #/bench view feeds the renderer)."""
        sizes = {}
        for path in ["/inspect", "/inspect/assets/inspector.js", "/inspect/assets/templates.js",
                     "/inspect/assets/inspector.css"]:
            with urllib.request.urlopen(SERVER.url + path, timeout=WAIT) as response:
                self.assertEqual(response.status, 200)
                body = response.read()
                sizes[path] = (len(body), len(gzip.compress(body)))
        DRIVER.get(SERVER.url + "/inspect#/bench?messages=10000&parties=50")
        result = wait_for(lambda: [r for r in DRIVER.find_elements(By.ID, "bench-result")
                                   if r.get_attribute("data-drawn-ms")], "the drawing")[0]
        self.assertEqual(result.get_attribute("data-rows"), str(1 + 10000 + 5000))
        drawn_groups = len(DRIVER.find_elements(By.CSS_SELECTOR, "#sequence g.msg, #sequence g.note"))
        self.assertLess(drawn_groups, 200, "only the visible rows are in the page")
        screenshot("bench-10000")
        total = sum(raw for raw, _ in sizes.values())
        total_gzip = sum(packed for _, packed in sizes.values())
        lines = [f"{path}: {raw} bytes ({packed} gzipped)" for path, (raw, packed) in sizes.items()]
        lines.append(f"assets in all: {total} bytes ({total_gzip} gzipped)")
        lines.append("10,000 messages, 50 parties (15,001 rows): "
                     f"first drawn in {result.get_attribute('data-drawn-ms')} ms, "
                     f"a jump to the middle redrawn in {result.get_attribute('data-scroll-ms')} ms, "
                     f"{drawn_groups} row groups in the page")
        (OUT / "report.txt").write_text("\n".join(lines) + "\n")
        print("\n" + "\n".join("REPORT " + line for line in lines))


if __name__ == "__main__":
    unittest.main()

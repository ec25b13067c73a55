// The inspector's live parts: the token form, the live tail of a session,
// its presence, acting on dead letters and forking. Plain browser
// JavaScript.
(function () {
  "use strict";

  function token() {
    var m = document.cookie.match(/(?:^|;\s*)a2_token=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function withToken(url) {
    var t = token();
    if (!t) return url;
    return url + (url.indexOf("?") < 0 ? "?" : "&") + "access_token=" + encodeURIComponent(t);
  }

  function api(method, url, body) {
    var headers = { "content-type": "application/json" };
    var t = token();
    if (t) headers.authorization = "Bearer " + t;
    return fetch(url, { method: method, headers: headers, body: body ? JSON.stringify(body) : undefined })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (json) {
          if (!r.ok) throw new Error((json.error && json.error.message) || r.statusText);
          return json;
        });
      });
  }

  var form = document.getElementById("token-form");
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var value = document.getElementById("token").value;
    document.cookie = "a2_token=" + encodeURIComponent(value) + "; path=/; SameSite=Strict";
    location.reload();
  });

  function text(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) el.className = cls;
    return el;
  }

  var heading = document.getElementById("session");
  if (!heading) return;
  var session = heading.getAttribute("data-session");
  var enc = encodeURIComponent(session);

  // The counters, read again after a change seen here (an event, a revive).
  function plural(n, noun) { return n + " " + noun + (n === 1 ? "" : "s"); }
  function set(name, value) {
    var el = document.querySelector('.counters [data-counter="' + name + '"]');
    if (el) el.textContent = value;
  }
  var refreshing = null;
  function refreshCounters() {
    if (refreshing) return;
    refreshing = setTimeout(function () {
      refreshing = null;
      api("GET", "/v1/sessions?limit=1&prefix=" + enc).then(function (page) {
        var s = (page.sessions || []).filter(function (x) { return x.session_id === session; })[0];
        if (!s) return;
        set("event_count", plural(s.event_count, "event"));
        set("pending_count", s.pending_count + " pending");
        set("failed_count", s.failed_count + " dead-lettered");
        set("attempt_count", plural(s.attempt_count, "attempt"));
        set("failure_count", plural(s.failure_count, "failure"));
        set("followers", s.followers + " following here");
        set("updated_at", "updated " + new Date(s.updated_at).toISOString().replace("T", " ").slice(0, 19));
      }).catch(function () {});
    }, 200);
  }

  // The live tail: every event after the page's frontier, as it is appended.
  var tail = document.getElementById("tail");
  var status = document.getElementById("tail-status");
  var after = heading.getAttribute("data-frontier");
  var feed = new EventSource(withToken("/v1/sessions/" + enc + "/live?after_index=" + after));
  feed.addEventListener("open", function () { status.textContent = "live"; status.className = "status live"; });
  feed.addEventListener("error", function () { status.textContent = "reconnecting"; status.className = "status"; });
  // The session is closed and every event of it arrived (CL4): the log is
  // complete, so the feed is not reopened.
  feed.addEventListener("end", function () { feed.close(); status.textContent = "closed"; status.className = "status"; });
  feed.addEventListener("event", function (m) {
    var e = JSON.parse(m.data);
    var li = document.createElement("li");
    li.setAttribute("data-index", e.index);
    li.appendChild(text("strong", "#" + e.index + " "));
    li.appendChild(text("span", e.type + " "));
    li.appendChild(text("code", JSON.stringify(e.payload)));
    tail.appendChild(li);
    tail.scrollTop = tail.scrollHeight;
    refreshCounters();
  });

  // Presence: a snapshot, then patches.
  var presence = {};
  var body = document.querySelector("#presence tbody");
  function render() {
    body.textContent = "";
    Object.keys(presence).sort().forEach(function (who) {
      Object.keys(presence[who]).sort().forEach(function (field) {
        var tr = document.createElement("tr");
        tr.appendChild(text("td", who));
        tr.appendChild(text("td", field));
        tr.appendChild(text("td", JSON.stringify(presence[who][field])));
        body.appendChild(tr);
      });
    });
  }
  var here = new EventSource(withToken("/v1/presence/" + enc + "/live"));
  here.addEventListener("snapshot", function (m) {
    presence = {};
    JSON.parse(m.data).entries.forEach(function (e) {
      (presence[e.participant] = presence[e.participant] || {})[e.field] = e.value;
    });
    render();
  });
  here.addEventListener("patch", function (m) {
    var p = JSON.parse(m.data);
    var mine = (presence[p.participant] = presence[p.participant] || {});
    Object.keys(p.values).forEach(function (field) {
      if (p.values[field] === null) delete mine[field]; else mine[field] = p.values[field];
    });
    if (!Object.keys(mine).length) delete presence[p.participant];
    render();
  });

  // A page left (or kept in the back/forward cache) closes its streams: a
  // browser opens at most six connections to a server, and streams of
  // pages left behind would leave the next page's requests waiting. A
  // page brought back from the cache loads afresh.
  window.addEventListener("pagehide", function () { feed.close(); here.close(); });
  window.addEventListener("pageshow", function (e) { if (e.persisted) location.reload(); });

  // Events: show only the rows of a state and a type prefix.
  var byState = document.getElementById("filter-state");
  var byType = document.getElementById("filter-type");
  function filter() {
    var state = byState.value, type = byType.value;
    document.querySelectorAll("#events tbody tr[data-index]").forEach(function (row) {
      var shown = (!state || row.getAttribute("data-state") === state)
        && (!type || (row.getAttribute("data-type") || "").indexOf(type) === 0);
      row.hidden = !shown;
    });
  }
  if (byState && byType) {
    byState.addEventListener("change", filter);
    byType.addEventListener("input", filter);
    document.getElementById("event-filter").addEventListener("submit", function (e) { e.preventDefault(); });
  }

  // Forks: a row's "fork here" sets the form's index; the form forks the
  // session there and opens the new one.
  var forkForm = document.getElementById("fork-form");
  var forkIndex = document.getElementById("fork-index");
  var forkTarget = document.getElementById("fork-target");
  var forkStatus = document.getElementById("fork-status");
  document.querySelectorAll("button.fork").forEach(function (button) {
    button.addEventListener("click", function () {
      forkIndex.value = button.getAttribute("data-index");
      forkTarget.focus();
      forkTarget.select();
    });
  });
  if (forkForm) {
    forkForm.addEventListener("submit", function (e) {
      e.preventDefault();
      var target = forkTarget.value;
      forkStatus.textContent = "forking…";
      api("POST", "/v1/sessions/" + enc + "/fork", { at_index: Number(forkIndex.value), target: target })
        .then(function () { location.href = "/ui/sessions/" + encodeURIComponent(target); })
        .catch(function (err) { forkStatus.textContent = err.message; });
    });
  }

  // Cancel buttons (CN1): the event will not run, or its handler is told
  // to stop; its row says cancelled.
  document.querySelectorAll("button.cancel").forEach(function (button) {
    button.addEventListener("click", function () {
      var index = button.getAttribute("data-index");
      button.disabled = true;
      api("POST", "/v1/sessions/" + enc + "/events/" + index + "/cancel", { reason: "cancelled in the inspector" })
        .then(function (answer) {
          var state = answer.event.state;
          var row = button.closest("tr");
          row.setAttribute("data-state", state);
          row.className = state;
          var badge = row.querySelector("span.state");
          if (badge) { badge.textContent = state; badge.className = "state " + state; }
          button.remove();
          refreshCounters();
        })
        .catch(function (err) { button.disabled = false; button.textContent = "retry: " + err.message; });
    });
  });

  // Dead letters: the revive buttons.
  document.querySelectorAll("button.revive").forEach(function (button) {
    button.addEventListener("click", function () {
      var index = button.getAttribute("data-index");
      button.disabled = true;
      api("POST", "/v1/sessions/" + enc + "/events/" + index + "/revive")
        .then(function () {
          button.textContent = "revived";
          button.className = "revived";
          // Its row in the events table is pending again.
          var row = document.querySelector('#events tr[data-index="' + index + '"]');
          if (row) {
            row.setAttribute("data-state", "pending");
            row.className = "pending";
            var badge = row.querySelector("span.state");
            if (badge) { badge.textContent = "pending"; badge.className = "state pending"; }
          }
          refreshCounters();
        })
        .catch(function (err) { button.disabled = false; button.textContent = "retry: " + err.message; });
    });
  });
})();

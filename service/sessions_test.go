package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

func TestCreateTalkSession(t *testing.T) {
	t.Run("creates a session for the caller", func(t *testing.T) {
		svc := start(t, setup{})
		v, err := svc.CreateTalkSession(alice, "  Trip plans ", service.SettingsInput{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := v.Title, "Trip plans"; got != want {
			t.Errorf("title %q, want %q (trimmed)", got, want)
		}
		if got, want := v.UserID, "alice"; got != want {
			t.Errorf("user %q, want %q", got, want)
		}
		if got, want := v.Settings.Agent, "demo"; got != want {
			t.Errorf("agent %q, want the default %q", got, want)
		}
		if got, want := v.Settings.BusyPolicy, service.BusyInterrupt; got != want {
			t.Errorf("busy policy %q, want the default %q", got, want)
		}
		if got, want := v.Status, service.SessionIdle; got != want {
			t.Errorf("status %q, want %q", got, want)
		}
		if v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("a new session has an active run %v or a question %v", v.ActiveRun, v.PendingQuestion)
		}
		if got, want := v.StreamCursor, service.EncodeCursor(v.ID, service.Cursor{}); got != want {
			t.Errorf("stream cursor %q, want the start of the log %q", got, want)
		}
		if got := view(t, svc, alice, v.ID); got.Title != "Trip plans" || got.UserID != "alice" {
			t.Errorf("View after create: %+v", got.TalkSession)
		}
		list, _, err := svc.Sessions(alice, nil, "")
		if err != nil || len(list) != 1 || list[0].ID != v.ID {
			t.Errorf("Sessions after create: %v %v", list, err)
		}
	})

	t.Run("the session is the caller's: another user cannot see it", func(t *testing.T) {
		svc := start(t, setup{})
		v := newSession(t, svc, alice, "", "")
		_, err := svc.View(bob, v.ID)
		wantCode(t, "bob's View", err, service.ENOTFOUND)
		list, _, err := svc.Sessions(bob, nil, "")
		if err != nil || len(list) != 0 {
			t.Errorf("bob's Sessions: %v %v", list, err)
		}
	})

	t.Run("EINVALID for a title that is too long", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxTitleLength = 5 }})
		_, err := svc.CreateTalkSession(alice, "abcdef", service.SettingsInput{})
		wantCode(t, "6 characters", err, service.EINVALID)
		// The length is counted in characters, not bytes.
		if _, err := svc.CreateTalkSession(alice, "héllö", service.SettingsInput{}); err != nil {
			t.Errorf("5 characters in 7 bytes: %v", err)
		}
		_, err = svc.CreateTalkSession(alice, "a\xffb", service.SettingsInput{})
		wantCode(t, "a title that is not UTF-8", err, service.EINVALID)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 1 {
			t.Errorf("%d sessions, want only the valid one", len(list))
		}
	})

	t.Run("EINVALID for an unknown agent", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("nope")})
		wantCode(t, "agent nope", err, service.EINVALID)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("a refused session was stored: %v", list)
		}
	})

	t.Run("EINVALID for an invalid setting", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxMessageBytes = 64 }})
		for name, in := range invalidSettings(64) {
			_, err := svc.CreateTalkSession(alice, "", in)
			wantCode(t, name, err, service.EINVALID)
		}
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("refused sessions were stored: %d", len(list))
		}
	})

	t.Run("valid settings are kept", func(t *testing.T) {
		svc := start(t, setup{agents: map[string]service.Runner{"other": newPuppet()}})
		policy := service.BusyReject
		v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{
			Agent: ptr("other"), Model: ptr("m1"), SystemPrompt: ptr("be brief"), Temperature: ptr(2.0), BusyPolicy: &policy})
		if err != nil {
			t.Fatal(err)
		}
		got := view(t, svc, alice, v.ID).Settings
		if got.Agent != "other" || *got.Model != "m1" || *got.SystemPrompt != "be brief" || *got.Temperature != 2 || got.BusyPolicy != service.BusyReject {
			t.Errorf("settings %+v", got)
		}
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.CreateTalkSession(nobody, "", service.SettingsInput{})
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})

	t.Run("EUNAVAILABLE after Close", func(t *testing.T) {
		svc := start(t, setup{})
		svc.Close()
		_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{})
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})
}

func TestView(t *testing.T) {
	t.Run("returns the caller's session with its status, active run, pending question and stream cursor, read together", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)

		v := view(t, svc, alice, sess.ID)
		if v.Status != service.SessionIdle || v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("idle session: status %s, run %v, question %v", v.Status, v.ActiveRun, v.PendingQuestion)
		}

		_, run := send(t, svc, alice, sess.ID, "hi")
		tn := p.next(t)
		f.until(runIs(run.ID, service.RunRunning))
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionRunning || v.ActiveRun == nil || v.ActiveRun.ID != run.ID || v.ActiveRun.Status != service.RunRunning {
			t.Errorf("running session: status %s, run %+v", v.Status, v.ActiveRun)
		}
		if got, want := v.StreamCursor, f.cursor(sess.ID); got != want {
			t.Errorf("stream cursor %q, want the position after the last event %q", got, want)
		}

		asked := tn.ask("Which one?", []string{"a", "b"})
		evs := f.until(runIs(run.ID, service.RunWaitingForInput))
		q := first(t, evs, service.EventQuestionAsked, nil).Question
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionWaitingForInput || v.ActiveRun == nil || v.ActiveRun.Status != service.RunWaitingForInput {
			t.Errorf("waiting session: status %s, run %+v", v.Status, v.ActiveRun)
		}
		if v.PendingQuestion == nil || v.PendingQuestion.ID != q.ID || v.PendingQuestion.Prompt != "Which one?" {
			t.Errorf("pending question %+v, want %s", v.PendingQuestion, q.ID)
		}
		if got, want := v.StreamCursor, f.cursor(sess.ID); got != want {
			t.Errorf("stream cursor %q, want the position after the last event %q", got, want)
		}
		if got, want := v.LastSeq, f.last.Seq; got != want {
			t.Errorf("LastSeq %d, want %d", got, want)
		}
		if _, _, err := svc.Respond(alice, q.ID, "a"); err != nil {
			t.Fatal(err)
		}
		asked.wait(t)
		tn.finish(nil)
		f.until(runEnds(run.ID))
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionIdle || v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("after the run: status %s, run %v, question %v", v.Status, v.ActiveRun, v.PendingQuestion)
		}
	})

	t.Run("ENOTFOUND when missing", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.View(alice, missingID)
		wantCode(t, "missing", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when another user's, as when missing", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, other := svc.View(bob, sess.ID)
		_, missing := svc.View(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("EINVALID for a malformed ID", func(t *testing.T) {
		svc := start(t, setup{})
		for _, id := range []string{"", "42", "not-a-uuid-not-a-uuid-not-a-uuid-xxx", missingID + "0"} {
			_, err := svc.View(alice, id)
			wantCode(t, "id "+id, err, service.EINVALID)
		}
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, err := svc.View(nobody, sess.ID)
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

func TestSessions(t *testing.T) {
	// Three sessions of alice's, created in this order, and one of bob's.
	three := func(t *testing.T, svc *service.Service) (s1, s2, s3 string) {
		t.Helper()
		s1 = newSession(t, svc, alice, "", "").ID
		s2 = newSession(t, svc, alice, "", "").ID
		newSession(t, svc, bob, "", "")
		s3 = newSession(t, svc, alice, "", "").ID
		return
	}
	ids := func(page []*service.SessionView) []string {
		var out []string
		for _, v := range page {
			out = append(out, v.ID)
		}
		return out
	}

	t.Run("returns a page of the caller's sessions, most recent activity first", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		page, hasNext, err := svc.Sessions(alice, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s3, s2, s1}; !equalStrings(got, want) {
			t.Errorf("sessions %v, want %v", got, want)
		}
		if hasNext {
			t.Error("hasNext on the only page")
		}
		// A message is activity: its session comes first.
		f := follow(t, svc, alice, s1, "")
		_, run := send(t, svc, alice, s1, "hello")
		f.until(runEnds(run.ID))
		page, _, _ = svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s1, s3, s2}; !equalStrings(got, want) {
			t.Errorf("after a message in the oldest: %v, want %v", got, want)
		}
	})

	t.Run("a rename and a settings change are activity", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		if _, err := svc.RenameTalkSession(alice, s2, "renamed"); err != nil {
			t.Fatal(err)
		}
		page, _, _ := svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s2, s3, s1}; !equalStrings(got, want) {
			t.Errorf("after renaming the middle one: %v, want %v", got, want)
		}
		if _, err := svc.UpdateSettings(alice, s1, service.SettingsInput{Model: ptr("m")}); err != nil {
			t.Fatal(err)
		}
		page, _, _ = svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s1, s2, s3}; !equalStrings(got, want) {
			t.Errorf("after changing the oldest one's settings: %v, want %v", got, want)
		}
	})

	t.Run("after the session-list cursor after", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		page, hasNext, err := svc.Sessions(alice, ptr(2), "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s3, s2}; !equalStrings(got, want) || !hasNext {
			t.Fatalf("first page %v (hasNext %v), want %v and more", got, hasNext, want)
		}
		page, hasNext, err = svc.Sessions(alice, ptr(2), service.EncodeSessionCursor(page[1].TalkSession))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s1}; !equalStrings(got, want) || hasNext {
			t.Errorf("second page %v (hasNext %v), want %v and no more", got, hasNext, want)
		}
	})

	t.Run("first is clamped to the page size limit", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxPageSize = 2 }})
		three(t, svc)
		page, hasNext, err := svc.Sessions(alice, ptr(100), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 2 || !hasNext {
			t.Errorf("%d sessions (hasNext %v), want the limit of 2 and more", len(page), hasNext)
		}
	})

	t.Run("without first, a page has the default size", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.DefaultPageSize = 2 }})
		three(t, svc)
		page, hasNext, err := svc.Sessions(alice, nil, "")
		if err != nil || len(page) != 2 || !hasNext {
			t.Errorf("%d sessions (hasNext %v, %v), want the default 2 and more", len(page), hasNext, err)
		}
	})

	t.Run("EINVALID for a bad cursor", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		for _, bad := range []string{"!!", "bm90IGEgY3Vyc29y", service.EncodeCursor(sess.ID, service.Cursor{Seq: 1}), service.EncodeMessageCursor(&service.Message{Seq: 1})} {
			_, _, err := svc.Sessions(alice, nil, bad)
			wantCode(t, "cursor "+bad, err, service.EINVALID)
		}
	})

	t.Run("EINVALID for a negative first", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.Sessions(alice, ptr(-1), "")
		wantCode(t, "first -1", err, service.EINVALID)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.Sessions(nobody, nil, "")
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

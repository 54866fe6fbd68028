package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// maxSessionID bounds the cookie value looked up.
const maxSessionID = 128

// session checks a session cookie's id: stored, not past its absolute end,
// not idle too long. An expired session is deleted.
func (a *Authenticator) session(ctx context.Context, id string, now time.Time) (store.BrowserSession, error) {
	if id == "" || len(id) > maxSessionID {
		return store.BrowserSession{}, unauthorized(errors.New("malformed session cookie"))
	}
	h := hashID(id)
	s, err := a.st.GetBrowserSession(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return store.BrowserSession{}, unauthorized(errors.New("unknown session"))
	}
	if err != nil {
		return store.BrowserSession{}, err
	}
	if !now.Before(s.ExpiresAt) || !now.Before(s.LastSeenAt.Add(a.o.SessionIdle)) {
		if err := a.st.DeleteBrowserSession(ctx, h); err != nil {
			a.log.Warn("deleting an expired session failed", "user", s.UserID, "err", err)
		}
		return store.BrowserSession{}, unauthorized(fmt.Errorf("session of %s expired", s.UserID))
	}
	if now.Sub(s.LastSeenAt) >= touchEvery {
		if err := a.st.TouchBrowserSession(ctx, h, now); err != nil {
			a.log.Warn("recording a session's use failed", "user", s.UserID, "err", err)
		}
	}
	return s, nil
}

// startSession creates a session for user with a new random id and sets
// its cookie. The session r came with, if any, ends: a login always
// issues a new id, so that an id planted before the login (session
// fixation) is worth nothing after it.
func (a *Authenticator) startSession(ctx context.Context, w http.ResponseWriter, r *http.Request, userID string) error {
	a.endSession(ctx, r)
	now := a.o.Now().UTC()
	id := trust.RandomID(32)
	if err := a.st.CreateBrowserSession(ctx, store.BrowserSession{
		Hash: hashID(id), UserID: userID, CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(a.o.SessionAbsolute),
	}); err != nil {
		return err
	}
	http.SetCookie(w, sessionCookie(id, int(a.o.SessionAbsolute/time.Second)))
	return nil
}

// endSession deletes the session r's cookie names, if any.
func (a *Authenticator) endSession(ctx context.Context, r *http.Request) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > maxSessionID {
		return
	}
	if err := a.st.DeleteBrowserSession(ctx, hashID(ck.Value)); err != nil {
		a.log.Warn("ending a session failed", "err", err)
	}
}

// sessionCookie is the session cookie with value id, or its deletion when
// maxAge < 0.
func sessionCookie(id string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	}
}

// SweepSessions deletes the sessions past their absolute end or idle too
// long, and returns how many; the control-plane runs it now and then so
// that abandoned sessions do not pile up.
func (a *Authenticator) SweepSessions(ctx context.Context) (int64, error) {
	now := a.o.Now()
	return a.st.DeleteBrowserSessions(ctx, now, now.Add(-a.o.SessionIdle))
}

// SweepRates deletes the shared rate-limit counts of windows that have
// ended (run it about once a window: a flood of distinct source addresses
// leaves a row each); with counts in memory there is nothing to do.
func (a *Authenticator) SweepRates(ctx context.Context) (int64, error) {
	if a.rates == nil {
		return 0, nil
	}
	return a.rates.SweepRates(ctx, a.o.Now().Truncate(rateWindow).Add(-rateWindow))
}

// Package store is the control-plane's durable state: tenants, envs, users,
// conversations, identity-token hashes, the usage record, worker reports and
// the issues the agent files.
//
// Store is implemented by store/sqlite (embedded default) and
// store/postgres; both run the same migrations and the same test suite
// (store/storetest).
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// Env is one environment of one tenant, served by its worker replicas.
type Env struct {
	Tenant    string
	Name      string
	WorkerURL string // base URL of the tenant-env's worker, e.g. http://talkide-worker.t-e.svc:8080
	CreatedAt time.Time
	// RetiredAt is when the env was retired (talkide admin env delete):
	// its rows stay, but no worker is provisioned for it. Zero while live.
	RetiredAt time.Time
	// Scale is how many worker replicas serve the env; only SetEnvScale
	// writes it.
	Scale EnvScale
}

// Scale defaults and bounds.
const (
	// DefaultTurnsPerReplica is the autoscaler's target of running turns
	// per replica: a turn mostly waits on the model, so a replica runs
	// several at once, yet few enough that one replica's share of the
	// session volume and CPU stays small.
	DefaultTurnsPerReplica = 8
	// MaxEnvReplicas bounds the replicas of one env: every replica mounts
	// the same session volume, whose file server is shared by the env.
	MaxEnvReplicas = 50
	// MaxTurnsPerReplica bounds the target: past it a replica's CPU, not
	// the model, limits the turns.
	MaxTurnsPerReplica = 1000
)

// ErrInvalidScale is wrapped by EnvScale.Validate.
var ErrInvalidScale = errors.New("invalid scale")

// EnvScale is how many worker replicas a tenant-env runs. A zero field is
// its default: MinReplicas 1, MaxReplicas MinReplicas (a fixed count),
// TurnsPerReplica DefaultTurnsPerReplica. With MaxReplicas above
// MinReplicas an autoscaler keeps the count between the two, aiming at
// TurnsPerReplica running turns on each replica.
type EnvScale struct {
	MinReplicas     int
	MaxReplicas     int
	TurnsPerReplica int
}

// Resolved is s with its defaults filled in.
func (s EnvScale) Resolved() EnvScale {
	if s.MinReplicas == 0 {
		s.MinReplicas = 1
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = s.MinReplicas
	}
	if s.TurnsPerReplica == 0 {
		s.TurnsPerReplica = DefaultTurnsPerReplica
	}
	return s
}

// Autoscaled reports whether the replicas follow the load (MaxReplicas
// above MinReplicas, once resolved).
func (s EnvScale) Autoscaled() bool {
	r := s.Resolved()
	return r.MaxReplicas > r.MinReplicas
}

// Summary says what s is, resolved: "3 replica(s) (fixed)" or "2-5
// replicas (autoscaled at 8 running turns per replica)".
func (s EnvScale) Summary() string {
	r := s.Resolved()
	if !r.Autoscaled() {
		return fmt.Sprintf("%d replica(s) (fixed)", r.MinReplicas)
	}
	return fmt.Sprintf("%d-%d replicas (autoscaled at %d running turns per replica)", r.MinReplicas, r.MaxReplicas, r.TurnsPerReplica)
}

// Validate checks s once resolved: 1 ≤ MinReplicas ≤ MaxReplicas ≤
// MaxEnvReplicas and 1 ≤ TurnsPerReplica ≤ MaxTurnsPerReplica. A
// negative field is never a default.
func (s EnvScale) Validate() error {
	if s.MinReplicas < 0 || s.MaxReplicas < 0 || s.TurnsPerReplica < 0 {
		return fmt.Errorf("%w: a negative value (min %d, max %d, turns per replica %d)", ErrInvalidScale, s.MinReplicas, s.MaxReplicas, s.TurnsPerReplica)
	}
	r := s.Resolved()
	switch {
	case r.MaxReplicas > MaxEnvReplicas:
		return fmt.Errorf("%w: %d replicas, at most %d", ErrInvalidScale, r.MaxReplicas, MaxEnvReplicas)
	case r.MinReplicas > r.MaxReplicas:
		return fmt.Errorf("%w: min replicas %d above max replicas %d", ErrInvalidScale, r.MinReplicas, r.MaxReplicas)
	case r.TurnsPerReplica > MaxTurnsPerReplica:
		return fmt.Errorf("%w: %d turns per replica, at most %d", ErrInvalidScale, r.TurnsPerReplica, MaxTurnsPerReplica)
	}
	return nil
}

// IdentityToken is the stored half of an identity token: never the token.
type IdentityToken struct {
	ID        string
	Tenant    string
	Env       string
	Hash      [32]byte // SHA-256 of the token's secret
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt time.Time // zero while valid
}

// User is a person who talks to Mara.
type User struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// Conversation belongs to one user and lives on the worker of one tenant-env.
type Conversation struct {
	ID        string
	Tenant    string
	Env       string
	UserID    string
	Title     string
	CreatedAt time.Time
	// LastActivityAt is when a message was last sent or a turn last
	// ended in it; CreateConversation starts it at CreatedAt (when zero).
	LastActivityAt time.Time
	// ArchivedAt is when the user archived the conversation; zero while
	// it is not archived.
	ArchivedAt time.Time
}

// ConversationChange is what UpdateConversation changes: each field that
// is set, the others stay.
type ConversationChange struct {
	Title *string
	// Untitled sets Title only on a conversation whose title is empty:
	// a generated title never replaces one the user gave.
	Untitled bool
	// Archived archives the conversation at At (one already archived
	// keeps its first ArchivedAt) or, false, unarchives it.
	Archived *bool
	At       time.Time
}

// Role is what a membership lets a user do in a tenant.
type Role string

const (
	// RoleMember sees and uses the user's own conversations.
	RoleMember Role = "member"
	// RoleTenantAdmin also sees every conversation of the tenant (or of the
	// membership's env).
	RoleTenantAdmin Role = "tenant-admin"
)

// Valid reports whether r is a role the store keeps.
func (r Role) Valid() bool { return r == RoleMember || r == RoleTenantAdmin }

// Membership puts a user in a tenant, or in one env of it, with a role.
type Membership struct {
	UserID string
	Tenant string
	Env    string // "": every env of the tenant
	Role   Role
	// FromClaim says an OpenID Connect login's tenants claim made it: a
	// later login whose claim lacks it removes it. A membership an
	// operator put (FromClaim false) no login changes or removes.
	FromClaim bool
	// CreatedAt is when the membership was first set; a later PutMembership
	// that changes the role keeps it.
	CreatedAt time.Time
}

// OIDCIdentity maps an OpenID Connect subject of an issuer to a user.
type OIDCIdentity struct {
	Issuer    string
	Subject   string
	UserID    string
	CreatedAt time.Time
}

// BrowserSession is a logged-in browser as the store keeps it: found by the
// SHA-256 of the cookie's id, never the id.
type BrowserSession struct {
	Hash       [32]byte
	UserID     string
	CreatedAt  time.Time
	LastSeenAt time.Time // the idle lifetime runs from here
	ExpiresAt  time.Time // the absolute end
}

// APIToken is the stored half of a user's API token: never the token.
type APIToken struct {
	ID         string
	UserID     string
	Name       string
	Hash       [32]byte // SHA-256 of the token's secret
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	LastUsedAt time.Time // zero: never used
	RevokedAt  time.Time // zero while valid
}

// UsageRecord is one model call that passed the gateway.
type UsageRecord struct {
	ID                       string // unique per gateway request
	Tenant                   string
	Env                      string
	ConversationID           string
	UserID                   string
	Model                    string
	Status                   int // upstream HTTP status, 0 when none was received
	Streamed                 bool
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
	StartedAt                time.Time
	Duration                 time.Duration
	// Purpose is what the call was for: "" for the agent's own calls,
	// PurposeTitle for the call that named the conversation.
	Purpose string
}

// PurposeTitle marks the usage record of the model call that named a
// conversation.
const PurposeTitle = "title"

// The kinds of ConversationText.
const (
	TextTitle     = "title"     // the conversation's title (one per conversation, key "title")
	TextUser      = "user"      // a message the user sent
	TextAssistant = "assistant" // the assistant's reply at the end of a turn
)

// ConversationText is one text the conversation search looks through.
type ConversationText struct {
	ConversationID string
	// Key is unique per conversation: a text given again under its key is
	// not indexed twice.
	Key  string
	Kind string // TextUser or TextAssistant; titles are kept by UpdateConversation and CreateConversation
	Body string
	At   time.Time
}

// SearchHit is one conversation a search found, with the text of it that
// matched best.
type SearchHit struct {
	Conversation Conversation
	Kind         string // the matching text's kind (TextTitle, TextUser, TextAssistant)
	Body         string // the matching text
	// Score orders hits, higher first; it compares hits of one search
	// only, and differs between the stores.
	Score float64
}

// StoredReport is a worker report as the control-plane keeps it.
type StoredReport struct {
	Tenant     string
	Env        string
	Report     contract.Report
	ReceivedAt time.Time
}

// Issue is an issue the agent filed in a conversation. Status,
// Severity and the limits on its fields are contract's; the store checks
// none of them.
type Issue struct {
	ID             string
	Tenant         string
	Env            string
	ConversationID string
	UserID         string // the conversation's user
	TurnID         string // the turn that filed it
	IdempotencyKey string // unique per tenant-env
	Title          string
	Body           string
	Severity       string
	Labels         []string
	Status         string
	CreatedAt      time.Time
	UpdatedAt      time.Time // the last comment or status change
	// Comments are oldest first; GetIssue and ListIssues fill them,
	// CreateIssue ignores them.
	Comments []IssueComment
}

// IssueComment is one comment on an issue.
type IssueComment struct {
	ID             string
	IssueID        string
	TurnID         string
	IdempotencyKey string // unique per issue
	Body           string
	Status         string // the status the comment set; empty for none
	CreatedAt      time.Time
}

// PageQuery selects a page of a tenant's reports (ListReportPage) or usage
// records (ListUsagePage), newest first.
type PageQuery struct {
	Tenant string // required
	Env    string // "": every env of the tenant
	// ConversationID, when set, keeps one conversation's.
	ConversationID string
	// Kind, when set, keeps reports of that kind (contract.ReportUsage,
	// ReportToolUse, ReportActivity); usage pages ignore it.
	Kind string
	// Before, when set, starts the page after that position (the Next of
	// the page before).
	Before *PagePosition
	Limit  int // at least 1
}

// PagePosition is where a page ends: a row's time, env and key (a report's
// idempotency key, a usage record's ID). Rows are ordered by time, env,
// then key, each descending and compared as bytes.
type PagePosition struct {
	Time time.Time
	Env  string
	Key  string
}

// ReportPage is a page of reports; Next is set when more may follow.
type ReportPage struct {
	Reports []StoredReport
	Next    *PagePosition
}

// UsagePage is a page of usage records; Next is set when more may follow.
type UsagePage struct {
	Usage []UsageRecord
	Next  *PagePosition
}

// Store is the control-plane's persistence. Every method is safe for
// concurrent use. Methods return ErrNotFound when the thing asked for does not
// exist; a list that finds nothing is empty, not an error. Times are kept to
// the millisecond and returned in UTC, durations to the microsecond.
type Store interface {
	// PutEnv creates the tenant (if needed) and the env, or updates the
	// env's WorkerURL; an existing env keeps its CreatedAt and Scale, and a
	// retired one becomes live again (e.RetiredAt and e.Scale are
	// ignored).
	PutEnv(ctx context.Context, e Env) error
	// RetireEnv marks the env retired at at; an env already retired keeps
	// its first RetiredAt.
	RetireEnv(ctx context.Context, tenant, env string, at time.Time) error
	// SetEnvScale sets the env's Scale as given (zeros stay zeros, read
	// as the defaults): ErrNotFound for an unknown env, ErrInvalidScale
	// wrapped when scale.Validate fails.
	SetEnvScale(ctx context.Context, tenant, env string, scale EnvScale) error
	GetEnv(ctx context.Context, tenant, env string) (Env, error)
	// ListEnvs returns every env ordered by tenant, then name.
	ListEnvs(ctx context.Context) ([]Env, error)

	// AddIdentityToken stores t: ErrNotFound when its tenant-env does not
	// exist, ErrConflict when a token with t.ID does.
	AddIdentityToken(ctx context.Context, t IdentityToken) error
	GetIdentityToken(ctx context.Context, id string) (IdentityToken, error)
	// RevokeIdentityToken sets the token's RevokedAt (which may lie in the
	// future: the end of a rotation's grace period); a token keeps the
	// earliest RevokedAt it was given.
	RevokeIdentityToken(ctx context.Context, id string, at time.Time) error
	// ListIdentityTokens returns the tokens of one tenant-env, oldest
	// first (CreatedAt, then ID).
	ListIdentityTokens(ctx context.Context, tenant, env string) ([]IdentityToken, error)

	// PutUser creates the user or leaves an existing one unchanged.
	PutUser(ctx context.Context, u User) error
	GetUser(ctx context.Context, id string) (User, error)

	// CreateConversation inserts c; created is false (and the stored one is
	// returned) when a conversation with c.ID exists. ErrConflict when it
	// exists but belongs to another user or tenant-env. ErrNotFound when
	// c's tenant-env or user does not exist.
	CreateConversation(ctx context.Context, c Conversation) (stored Conversation, created bool, err error)
	GetConversation(ctx context.Context, id string) (Conversation, error)
	// ListConversations returns the user's conversations, the most
	// recently active first (LastActivityAt descending, then ID
	// descending), archived ones too.
	ListConversations(ctx context.Context, userID string) ([]Conversation, error)
	// TouchConversation moves the conversation's LastActivityAt to at if
	// that is later. ErrNotFound when there is no such conversation.
	TouchConversation(ctx context.Context, id string, at time.Time) error
	// AddConversationText indexes t for SearchConversations; added is
	// false, and nothing changes, when t's conversation already has a text
	// under t.Key. The conversation need not be stored (as for reports).
	AddConversationText(ctx context.Context, t ConversationText) (added bool, err error)
	// SearchConversations returns the user's conversations (archived ones
	// too) whose title or texts hold every word of query (the last one as
	// a prefix: the user may still be typing it), best first, one hit per
	// conversation, at most limit (at least 1). The words are
	// SearchTerms(query): no character of the query is syntax to the
	// database. A query without a word finds nothing.
	SearchConversations(ctx context.Context, userID, query string, limit int) ([]SearchHit, error)
	// UpdateConversation applies ch to the conversation and returns it as
	// stored after. ErrNotFound when there is no such conversation.
	UpdateConversation(ctx context.Context, id string, ch ConversationChange) (Conversation, error)

	// ListTenantConversations returns the conversations of a tenant (of
	// one env of it when env is not ""), ordered as ListConversations.
	ListTenantConversations(ctx context.Context, tenant, env string) ([]Conversation, error)

	// PutMembership sets m's role, creating the membership when it does not
	// exist. ErrNotFound when m's user, tenant or (non-empty) env does not
	// exist.
	PutMembership(ctx context.Context, m Membership) (Membership, error)
	// DeleteMembership removes one membership; ErrNotFound when there is
	// none.
	DeleteMembership(ctx context.Context, userID, tenant, env string) error
	// ListMemberships returns the memberships of a user (userID set) or of
	// a tenant (tenant set) or of the user in the tenant (both), ordered by
	// tenant, env, then user.
	ListMemberships(ctx context.Context, userID, tenant string) ([]Membership, error)

	// PutOIDCIdentity links (Issuer, Subject) to a user, or returns the
	// stored link unchanged when there is one (created false), to whatever
	// user. ErrNotFound when the user does not exist.
	PutOIDCIdentity(ctx context.Context, id OIDCIdentity) (stored OIDCIdentity, created bool, err error)
	GetOIDCIdentity(ctx context.Context, issuer, subject string) (OIDCIdentity, error)

	// CreateBrowserSession stores s: ErrConflict when its hash is taken,
	// ErrNotFound when its user does not exist.
	CreateBrowserSession(ctx context.Context, s BrowserSession) error
	GetBrowserSession(ctx context.Context, hash [32]byte) (BrowserSession, error)
	// TouchBrowserSession moves the session's LastSeenAt to at if that is
	// later. ErrNotFound when there is no such session.
	TouchBrowserSession(ctx context.Context, hash [32]byte, at time.Time) error
	// DeleteBrowserSession ends a session; ending one that does not exist
	// is not an error.
	DeleteBrowserSession(ctx context.Context, hash [32]byte) error
	// DeleteBrowserSessions removes the sessions that expire by before, or
	// whose LastSeenAt is before idleBefore, and returns how many.
	DeleteBrowserSessions(ctx context.Context, before, idleBefore time.Time) (int64, error)

	// AddAPIToken stores t: ErrConflict when t.ID is taken, ErrNotFound
	// when its user does not exist.
	AddAPIToken(ctx context.Context, t APIToken) error
	GetAPIToken(ctx context.Context, id string) (APIToken, error)
	// ListAPITokens returns a user's tokens (every user's when userID is
	// ""), revoked ones too, ordered by CreatedAt then ID.
	ListAPITokens(ctx context.Context, userID string) ([]APIToken, error)
	// RevokeAPIToken sets the token's RevokedAt; a token already revoked
	// keeps its first.
	RevokeAPIToken(ctx context.Context, id string, at time.Time) error
	// TouchAPIToken moves the token's LastUsedAt to at if that is later.
	TouchAPIToken(ctx context.Context, id string, at time.Time) error

	// RecordUsage appends a usage record; a second record with the same ID is
	// ignored. The record's tenant-env and conversation need not be stored:
	// usage is a fact and is never refused for what it refers to.
	RecordUsage(ctx context.Context, u UsageRecord) error
	// RecordUsages records each of us as RecordUsage does, in one
	// transaction: on an error nothing is stored. A record whose ID is
	// stored already, or comes earlier in us, is ignored. An empty us does
	// nothing.
	RecordUsages(ctx context.Context, us []UsageRecord) error
	// ListUsage returns a conversation's usage oldest first (StartedAt, then
	// ID).
	ListUsage(ctx context.Context, conversationID string) ([]UsageRecord, error)

	// AddReports stores reports of one tenant-env and returns the indexes
	// in rs, ascending, of those it stored now; a report whose idempotency
	// key is already stored for that tenant-env (or earlier in rs) counts as
	// a duplicate and changes nothing. The same key under another tenant-env
	// is another report. A report without an idempotency key fails the whole
	// batch and stores nothing. As with RecordUsage, the tenant-env and
	// conversation need not be stored.
	AddReports(ctx context.Context, tenant, env string, rs []contract.Report, received time.Time) (added []int, duplicates int, err error)
	// ListReports returns a conversation's reports ordered by Report.Time,
	// then tenant, env and idempotency key.
	ListReports(ctx context.Context, conversationID string) ([]StoredReport, error)

	// ListReportPage returns a page of the reports q selects, newest first
	// (Report.Time, env, idempotency key, each descending).
	ListReportPage(ctx context.Context, q PageQuery) (ReportPage, error)
	// ListUsagePage returns a page of the usage records q selects, newest
	// first (StartedAt, env, ID, each descending).
	ListUsagePage(ctx context.Context, q PageQuery) (UsagePage, error)

	// CreateIssue stores i (its Comments are ignored); created is false, and
	// the stored issue is returned, when an issue with i's tenant, env and
	// idempotency key exists. ErrConflict when that issue belongs to another
	// conversation, or i.ID is taken. ErrNotFound when i's tenant-env,
	// conversation or user does not exist.
	CreateIssue(ctx context.Context, i Issue) (stored Issue, created bool, err error)
	// GetIssue returns an issue with its comments.
	GetIssue(ctx context.Context, id string) (Issue, error)
	// ListIssues returns a conversation's issues with their comments, newest
	// first (CreatedAt descending, then ID descending). status "" lists
	// every status; limit <= 0 lists all.
	ListIssues(ctx context.Context, conversationID, status string, limit int) ([]Issue, error)
	// AddIssueComment appends c to its issue and, when c.Status is set,
	// changes the issue's status; either way the issue's UpdatedAt becomes
	// c.CreatedAt if that is later. created is false, the stored comment is
	// returned and nothing changes when the issue has a comment with c's
	// idempotency key. ErrNotFound when the issue does not exist;
	// ErrConflict when c.ID is taken.
	AddIssueComment(ctx context.Context, c IssueComment) (stored IssueComment, created bool, err error)

	Close() error
}

// RateWindows counts events in fixed time windows that every control-plane
// replica on the store shares: the browser API's rate limits hold across
// replicas only when their counts are kept where all of them look. A store
// that only one process opens (SQLite) does not implement it; its callers
// count in memory.
type RateWindows interface {
	// HitRate counts one event of key under the limit name in the window
	// that starts at start and returns the window's count, this event
	// included. Concurrent calls from any replica each count once.
	HitRate(ctx context.Context, name, key string, start time.Time) (int64, error)
	// RateHits returns the count of key's window that starts at start,
	// without counting; 0 when nothing was counted in it.
	RateHits(ctx context.Context, name, key string, start time.Time) (int64, error)
	// SweepRates deletes the windows that started before before, and
	// returns how many.
	SweepRates(ctx context.Context, before time.Time) (int64, error)
}

// The kinds of StreamCount.
const (
	StreamsOfUser         = "user"
	StreamsOfConversation = "conversation"
)

// StreamCount is how many browser event streams one replica holds open of
// one user or of one conversation.
type StreamCount struct {
	Kind    string // StreamsOfUser or StreamsOfConversation
	Subject string // the user's or the conversation's id
	// Streams is the replica's open streams of Subject; in a change given
	// to PublishStreamCounts, 0 says it has none left.
	Streams int64
}

// StreamCounts is where the control-plane replicas on one store publish
// how many browser streams each holds open, so that a per-user or
// per-conversation cap counts the streams of every replica. Each replica
// beats a heartbeat as it publishes; one whose heartbeat is older than the
// caller's TTL is no longer counted, and is swept with its counts.
// Both stores implement it; talkide shares the counts only on PostgreSQL,
// which many replicas open.
type StreamCounts interface {
	// PublishStreamCounts beats replica's heartbeat at at and applies
	// changes to the counts it published: a change of 0 streams removes
	// that count. With whole, changes are everything replica holds: they
	// replace what it published before, and a replica the store does not
	// know (new, or swept) is recorded. Without whole, a replica the store
	// does not know changes nothing and known is false: the caller then
	// publishes whole. A change of an unknown kind fails the call and
	// changes nothing.
	PublishStreamCounts(ctx context.Context, replica string, at time.Time, changes []StreamCount, whole bool) (known bool, err error)
	// OtherStreamCounts returns the counts of every replica but replica
	// whose heartbeat is at since or later, summed by kind and subject, in
	// no particular order.
	OtherStreamCounts(ctx context.Context, replica string, since time.Time) ([]StreamCount, error)
	// WithdrawStreamCounts removes replica's heartbeat and counts; a
	// replica the store does not know is not an error.
	WithdrawStreamCounts(ctx context.Context, replica string) error
	// SweepStreamCounts removes the replicas whose heartbeat is before
	// before, with their counts, and returns how many replicas.
	SweepStreamCounts(ctx context.Context, before time.Time) (int64, error)
}

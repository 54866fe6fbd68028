// Package chatclient is the logic of `talkide chat`: a client of the
// control-plane's browser API that sends messages, follows a conversation's
// event stream without gaps or duplicates, and renders it for a terminal;
// and the tokens file `talkide login` keeps for it.
package chatclient

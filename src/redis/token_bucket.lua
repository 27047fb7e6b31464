-- The token bucket (src/token_bucket.rs): take n tokens, or peek. gcra.lua follows.
local KIND = 'bucket'

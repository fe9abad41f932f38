
Bfc3.biasJ(³Ü<ĞAå;¤qŠ¼rÊr½#ßN<Ë5x=Qàx=p¢¶½ùéİº¯ã¼